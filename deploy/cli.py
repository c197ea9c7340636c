"""The ``timeshare`` command line.

    timeshare demo build [--repo PATH] [--only NAME ...] [--force]
    timeshare demo traffic [--duration 60] [--rate 40] ...   (loopback only)
    timeshare serve [--config deploy/config.yaml] [--repo PATH] [--env test|staging|prod]
    timeshare status [--url http://127.0.0.1:8000] [--json | --watch]
    timeshare k8s render --env prod [--output FILE]   (the KubeRay RayService: deploy/k8s.py)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from deploy.load_problems import load_problems

__all__ = ["main"]


def _demo_build(args: argparse.Namespace) -> int:
    from deploy.demo import build_demo_repository

    manifest = build_demo_repository(args.repo, only=args.only or None, force=args.force)
    for name, info in sorted(manifest.items()):
        print(f"{name:26s} {info['format']:12s} params={info['parameters']:>8d} "
              f"test_accuracy={info['test_accuracy']:.4f}")
    print(f"{len(manifest)} models in {args.repo}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from deploy.demo import build_demo_repository

    repo = Path(args.repo)
    if not (repo / "manifest.json").exists():
        print(f"building the demo model repository in {repo} (first run only)...", flush=True)
        build_demo_repository(repo)
    serve_bin = Path(sys.executable).with_name("serve")
    config = args.config
    if args.env:
        config = _with_environment(Path(args.config), args.env)
    cmd = [str(serve_bin), "run", config]
    print("$", " ".join(cmd), flush=True)
    from deploy.ray_env import serve_environment  # Ray Serve's measured fast paths

    os.execve(cmd[0], cmd, serve_environment(os.environ))
    return 0  # not reached


def _with_environment(config: Path, env: str) -> str:
    """A copy of the Serve config whose ``timeshare`` app runs in environment ``env``."""
    import yaml

    doc = yaml.safe_load(config.read_text())
    apps = [a for a in doc.get("applications", []) if a.get("name") == "timeshare"]
    if not apps:
        raise SystemExit(f"{config}: no application named 'timeshare'")
    apps[0].setdefault("args", {})["environment"] = env
    out = config.with_name(f".{config.stem}.{env}.yaml")  # beside it: relative paths still work
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(out)


def _status(args: argparse.Namespace) -> int:
    import httpx

    try:
        key = args.api_key or os.environ.get("TIMESHARE_API_KEY")
        r = httpx.get(f"{args.url}/v2/status", timeout=10,
                      headers={"X-API-Key": key} if key else None)
    except httpx.HTTPError as e:
        print(f"cannot reach {args.url}: {e}", file=sys.stderr)
        return 2
    if r.status_code != 200:  # 401: the app has an operator key and none (or another) was given
        print(f"{args.url}/v2/status: {r.status_code} {r.text}", file=sys.stderr)
        return 2
    data = r.json()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for pool, info in data.get("pools", {}).items():
        if "error" in info:
            print(f"[{pool}] error: {info['error']}")
            continue
        dev = info.get("device", {})
        print(f"[{pool}] device={dev.get('device')} resident={len(dev.get('resident', []))} "
              f"queues={dev.get('queue_depth')}")
        for name, m in info.get("models", {}).items():
            states = ", ".join(f"{v}:{s['state']}" for v, s in m["versions"].items())
            print(f"  {name:26s} {m.get('state', ''):8s} default={m['default_version']}  "
                  f"{states}")
    problems = load_problems(data)
    print(f"refused or failed: {len(problems) or 'none'}")
    for p in problems:  # the reason names the file and the field
        print(f"  {p.describe()}")
    breakers = data.get("breakers", {})
    print("breakers:", ", ".join(f"{k}={v}" for k, v in sorted(breakers.items())) or "none")
    counters = data.get("cache", {}).get("counters", {})
    hits = {t: counters.get(f"{t}.hit", 0) for t in ("memory", "redis", "semantic")}
    looked = sum(hits.values()) + counters.get("compute", 0)
    rates = ", ".join(f"{t} {h / looked:.0%}" for t, h in hits.items()) if looked else "no lookups"
    redis_ok = data.get("cache", {}).get("redis_available")
    print(f"cache hit rate: {rates} (redis available: {redis_ok})")
    alerts = data.get("alerts")
    if isinstance(alerts, dict):
        print(f"open alerts: {alerts.get('firing', '?')} firing of {alerts.get('alerts', '?')} "
              f"({alerts.get('environment', '?')})")
    return 0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="timeshare", description="Timeshare operations")
    sub = ap.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="demo model repository").add_subparsers(
        dest="demo_command", required=True)
    build = demo.add_parser("build", help="train the demo models from bundled data")
    build.add_argument("--repo", default="var/model_repository")
    build.add_argument("--only", nargs="*", help="only these models")
    build.add_argument("--force", action="store_true", help="retrain models already present")
    build.set_defaults(func=_demo_build)
    traffic = demo.add_parser("traffic", help="a bounded Zipf mix of realtime and batch calls "
                              "over the zoo (loopback only; see --help)", add_help=False)
    traffic.set_defaults(func=lambda a: _load("deploy.demo_traffic:main")([]))

    serve = sub.add_parser("serve", help="build the demo repository if missing, then serve run")
    serve.add_argument("--config", default="deploy/config.yaml")
    serve.add_argument("--repo", default="var/model_repository")
    serve.add_argument("--env", choices=["test", "staging", "prod"],
                       help="environment overlay (deploy/env/ENV.yaml); default: the config's")
    serve.set_defaults(func=_serve)

    status = sub.add_parser("status", help="print the app's models, residency and queues")
    status.add_argument("--url", default="http://127.0.0.1:8000")
    status.add_argument("--json", action="store_true")
    status.add_argument("--api-key", default=None,
                        help="operator key, when the app has one (default: $TIMESHARE_API_KEY)")
    status.add_argument("--watch", action="store_true",
                        help="live view, refreshed every second (deploy/status_watch.py; "
                        "--frames N, --record FILE, --interval S)")
    status.set_defaults(func=_status)

    for name, target, help_ in _EXTERNAL:
        p = sub.add_parser(name, help=help_, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=lambda a, t=target, n=name: _dispatch(n, t, a.rest))
    return ap


# Subcommands implemented in their own packages: (name, "module:function" or {verb: ...}, help).
# Each function takes the remaining argv and returns the exit status.
_EXTERNAL: list[tuple[str, str | dict[str, str], str]] = [
    ("loadtest", "deploy.loadtest:main", "open-loop load test with a Markdown/JSON report"),
    ("usage", "deploy.usage:main", "requests and device-seconds per caller from the call log"),
    ("alerts", {"test": "alerting.cli:alerts_test"}, "alerts test: send a test notification"),
    ("routes", {"retrain": "deploy.routes_cli:retrain_main",
                "calibrate": "deploy.routes_cli:calibrate_main",
                "evaluate": "deploy.text_routes_cli:evaluate_main"},
     "routes retrain|calibrate|evaluate: train, calibrate, evaluate a router"),
    ("models", {"push": "deploy.models_cli:push_main", "retire": "deploy.models_cli:retire_main"},
     "models push DIR | retire NAME VERSION: publish or retire a version over the API"),
    ("k8s", {"render": "deploy.k8s:render_main"},
     "k8s render --env ENV: the KubeRay RayService of an environment (deploy/kubernetes)"),
]


def _dispatch(name: str, target: str | dict[str, str], rest: list[str]) -> int:
    if isinstance(target, str):
        return _load(target)(rest)
    if not rest or rest[0] not in target:
        verbs = "|".join(target)
        print(f"usage: timeshare {name} {{{verbs}}} ...", file=sys.stderr)
        return 2
    return _load(target[rest[0]])(rest[1:])


# The CLI's own packages: subcommand paths are code constants, the allowlist keeps them that way.
_SUBCOMMAND_MODULES = ("deploy", "alerting")


def _load(path: str) -> Callable[[list[str]], int]:
    from common.trust import ModuleAllowlist, resolve_callable

    return resolve_callable(path, allow=ModuleAllowlist(_SUBCOMMAND_MODULES), what="subcommand")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one line per request
    argv = sys.argv[1:] if argv is None else list(argv)
    external = {name: target for name, target, _ in _EXTERNAL}
    if argv[:1] == ["status"] and "--watch" in argv:  # the live view has its own parser
        return int(_load("deploy.status_watch:main")([a for a in argv[1:] if a != "--watch"]))
    if argv[:2] == ["demo", "traffic"]:  # its own parser takes everything after the name
        return int(_load("deploy.demo_traffic:main")(argv[2:]) or 0)
    if argv and argv[0] in external:  # their own parsers handle everything after the name
        return int(_dispatch(argv[0], external[argv[0]], argv[1:]) or 0)
    args = _parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
