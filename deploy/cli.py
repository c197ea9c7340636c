"""The ``timeshare`` command line.

    timeshare demo build [--repo PATH] [--only NAME ...] [--force]
    timeshare serve [--config deploy/config.yaml] [--repo PATH]   # build demo if missing, serve run
    timeshare status [--url http://127.0.0.1:8000]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Callable

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
    cmd = [str(serve_bin), "run", args.config]
    print("$", " ".join(cmd), flush=True)
    os.execv(cmd[0], cmd)
    return 0  # not reached


def _status(args: argparse.Namespace) -> int:
    import httpx

    try:
        data = httpx.get(f"{args.url}/v2/status", timeout=10).json()
    except httpx.HTTPError as e:
        print(f"cannot reach {args.url}: {e}", file=sys.stderr)
        return 2
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
            print(f"  {name:26s} default={m['default_version']}  {states}")
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

    serve = sub.add_parser("serve", help="build the demo repository if missing, then serve run")
    serve.add_argument("--config", default="deploy/config.yaml")
    serve.add_argument("--repo", default="var/model_repository")
    serve.set_defaults(func=_serve)

    status = sub.add_parser("status", help="print the app's models, residency and queues")
    status.add_argument("--url", default="http://127.0.0.1:8000")
    status.add_argument("--json", action="store_true")
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
    ("routes", {"retrain": "router.route_training:retrain_main",
                "calibrate": "router.route_training:calibrate_main"},
     "routes retrain|calibrate: train the predictive router, calibrate a threshold"),
]


def _dispatch(name: str, target: str | dict[str, str], rest: list[str]) -> int:
    if isinstance(target, str):
        return _load(target)(rest)
    if not rest or rest[0] not in target:
        verbs = "|".join(target)
        print(f"usage: timeshare {name} {{{verbs}}} ...", file=sys.stderr)
        return 2
    return _load(target[rest[0]])(rest[1:])


def _load(path: str) -> Callable[[list[str]], int]:
    from pool.loader import resolve_callable

    return resolve_callable(path, what="subcommand")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one line per request
    argv = sys.argv[1:] if argv is None else list(argv)
    external = {name: target for name, target, _ in _EXTERNAL}
    if argv and argv[0] in external:  # their own parsers handle everything after the name
        return int(_dispatch(argv[0], external[argv[0]], argv[1:]) or 0)
    args = _parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
