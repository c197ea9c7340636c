"""Overload at the front door: open-loop HTTP at 1x, 2x, 3x and 5x the measured capacity.

``python -m benchmarks.overload_http --json out.json [--seconds 8] [--device-ms 20]``

The server is the real ingress (``benchmarks._overload_server``: ``router.ingress.Ingress``'s own
``__init__``, pipeline, in-process CPU pool, HTTP app) served by uvicorn in its own process; Ray
Serve's proxy is not in the path (its share is the hop this code does not control, see
``router.edge``). The model holds the device ``--device-ms`` per request (max batch 1), so the
capacity is fixed and measured in the same run (closed loop, the baseline server).

Behind Ray (``--ray-modes``, every level, the same schedules; the app as ``serve run`` builds
it, ``benchmarks._overload_ray``): ``proxy`` (Serve's proxy in front, Ray's default settings),
``listener`` (Timeshare's own listener in the ingress replica, ``router.listener``, with the
settings ``make serve`` uses, ``deploy.ray_env``) and, on request, ``direct`` (those settings
with Serve's direct ingress: the client on the ingress replica's own port) and ``proxy_served``
(Serve's proxy under those settings: the proxy as ``make serve`` runs it). Beside each arm behind
Serve's proxy (``--ceiling``, on by default) a no-op Serve deployment runs behind the same proxy
under the same settings and schedules (``benchmarks._proxy_ceiling``): ``proxy_ceiling`` and
``beside_proxy_ceiling`` say at which levels the proxy gets even a no-op's answers back within the
deadline, so a shortfall there is told apart from Timeshare's own. Not a target.

Two arms, the same arrival schedules: ``baseline`` (``edge.enabled: false``: today's behaviour)
and ``edge``. Traffic: 20 % realtime, 50 % interactive, 30 % batch, deadline 500 ms, the priority
in the v2 body's ``parameters`` (the edge reads it with a bounded scan of the raw body). The
client (``benchmarks._openloop``) is a separate process; latency runs from each request's planned
send time.

Targets (issue 38), at every level (1x, 2x, 3x, 5x), for the ``edge`` arm and the ``proxy`` and
``listener`` Ray arms (``meets_targets`` needs all three): goodput (200, not degraded, within the
deadline) >= 95 % of the capacity; realtime p99 (served answers) <= its p99 at 1x + 50 ms and <=
the deadline; every shed answer (429/503, or labelled ``shed``) within 50 ms; refused share
(shed, or refused unrun by the device's triage: ``RequestExpired``) batch >= interactive >=
realtime; sent = answered. Each level also counts, per class, the answers served late, the
degraded answers by their ``reason`` and the shed ones by the rule that shed them
(``shed_reasons``), and gives how long the answers the device's triage refused unrun took
(``expired_p50_ms`` / ``expired_p99_ms``: what a request the edge let through waited before
its labelled fallback), and what the device did (``device``, read
from the app's ``/v2/status`` before and after: its batches, their mean forward time, its busy
share, and that forward time over the one measured with the capacity, ``capacity_forward_ms``:
a device thread that shares a busy process and host waits inside its forward for a core or the
interpreter, and only the inverse of that ratio of the capacity is left to serve).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._device_status import compute_delta, device_counters
from benchmarks._output import emit, stdout_to_stderr
from benchmarks._overload_ray import run_ray_arm
from benchmarks._overload_server import PATH, Server, infer_body, make_device_model
from benchmarks._proc_cpu import cpu_model
from benchmarks._proxy_ceiling import ceiling_summary, run_ceiling
from deploy.demo import build_demo_repository
from deploy.ray_env import ENV
from router.edge import EdgeSettings

MIX = {"realtime": 0.2, "interactive": 0.5, "batch": 0.3}
LEVELS = (1, 2, 3, 5)
SHED_MAX_S = 0.050
# The edge runs with the app's default settings unless --edge-json says otherwise (issue 38: the
# targets hold with the defaults).
EDGE_OVERRIDES: dict[str, Any] = {}
RT_SLACK_S = 0.050
GOODPUT_MIN = 0.95  # of the capacity, at every level (issue 38)


body = infer_body


def client(job: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks._openloop"], input=json.dumps(job),
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"load client failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1e3, 1) if values else None


_EXPIRED = "error: RequestExpired"


def _refused(a: list[Any]) -> bool:
    """Refused unrun: shed (the edge or the pipeline), or refused by the device's triage before
    it ran (``RequestExpired``, answered at once by its labelled fallback). The one admission
    model decides at all three places: a request the edge lets through on its deadline and the
    device then refuses was refused by the same rule, one step later."""
    return bool(a[4]) or (bool(a[3]) and len(a) > 6 and a[6] == _EXPIRED)


def _reasons(answers: Any) -> dict[str, int]:
    """How many of ``answers`` gave each ``reason`` label ("?": none)."""
    out: dict[str, int] = {}
    for a in answers:
        key = (a[6] if len(a) > 6 else None) or "?"
        out[key] = out.get(key, 0) + 1
    return out


_SHED_RULE = re.compile(r"overload:[a-z]+|would_miss_deadline")


def _shed_rules(answers: Any) -> dict[str, int]:
    """How many shed answers each rule shed, and where: ``edge`` (``router.edge``) or
    ``pipeline`` (``router.pipeline``), then ``overload:<class>`` (a count cap or the class's
    objective) or ``would_miss_deadline``. Only a shed answered by its labelled fallback names
    its rule; a bare 503 counts as "?"."""
    out: dict[str, int] = {}
    for a in answers:
        reason = (a[6] if len(a) > 6 else None) or ""
        rule = _SHED_RULE.search(reason)
        key = "?" if rule is None else (
            f"{'edge' if reason.startswith('shed at the edge') else 'pipeline'}: {rule.group()}")
        out[key] = out.get(key, 0) + 1
    return out


def summarize(answers: list[list[Any]], *, sent: int, seconds: float, capacity: float,
              deadline_s: float) -> dict[str, Any]:
    """Figures of one level: goodput, latencies by class, shed answers and their latency."""
    good = [a for a in answers if a[2] == 200 and not a[3] and a[1] <= deadline_s]
    shed = [a for a in answers if a[4]]
    by_class: dict[str, Any] = {}
    for cls in MIX:
        mine = [a for a in answers if a[0] == cls]
        served = [a[1] for a in mine if a[2] == 200 and not a[3]]
        # how long a request the edge let through waited before the device refused it unrun
        expired = [a[1] for a in mine if a[3] and not a[4] and len(a) > 6 and a[6] == _EXPIRED]
        by_class[cls] = {
            "sent": len(mine), "served": len(served),
            "shed": sum(1 for a in mine if a[4]),
            "shed_share": round(sum(1 for a in mine if a[4]) / max(len(mine), 1), 3),
            "refused_share": round(sum(1 for a in mine if _refused(a)) / max(len(mine), 1), 3),
            "late_or_degraded": sum(1 for a in mine if not a[4] and not (
                a[2] == 200 and not a[3] and a[1] <= deadline_s)),
            "late": sum(1 for a in mine if a[2] == 200 and not a[3] and a[1] > deadline_s),
            "degraded_reasons": _reasons(a for a in mine if a[3] and not a[4]),
            "shed_reasons": _shed_rules(a for a in mine if a[4]),
            "served_p50_ms": _p(served, 50), "served_p99_ms": _p(served, 99),
            "expired_p50_ms": _p(expired, 50), "expired_p99_ms": _p(expired, 99)}
    statuses: dict[str, int] = {}
    for a in answers:
        statuses[str(a[2])] = statuses.get(str(a[2]), 0) + 1
    goodput = len(good) / seconds
    # time outside the edge (client, loopback, uvicorn; plus Ray's proxy when it is in the path)
    outside = [a[1] - a[5] for a in answers if a[2] == 200 and len(a) > 5 and a[5] is not None]
    return {
        "outside_edge_p50_ms": _p(outside, 50), "outside_edge_p99_ms": _p(outside, 99),
        "offered_rps": round(sent / seconds, 1), "sent": sent,
        "answered": sum(1 for a in answers if a[2] != 0), "statuses": statuses,
        "goodput_rps": round(goodput, 1), "goodput_vs_capacity": round(goodput / capacity, 3),
        "shed": len(shed), "shed_max_ms": _p([a[1] for a in shed], 100),
        "shed_p99_ms": _p([a[1] for a in shed], 99), "classes": by_class}


def level_job(port: int, rate: float, multiple: int, *, args) -> dict[str, Any]:
    """The load client's job for one open-loop level (same schedule for every arm: the seed is
    the multiple)."""
    job: dict[str, Any] = {
        "mode": "open", "port": port, "path": PATH, "rate": rate, "seconds": args.seconds,
        "mix": MIX, "seed": multiple, "body": {c: body(c, args.deadline_ms) for c in MIX}}
    if args.class_headers:  # the class and deadline, also as headers
        job["headers"] = {c: {"Timeshare-Priority": c,
                              "Timeshare-Deadline-Ms": f"{args.deadline_ms:g}"} for c in MIX}
    if args.request_start:  # each request stamped at its planned instant, as a front proxy does
        job["request_start"] = True
    return job


DRAIN_S = 1.0  # after each level, so the next one starts on an idle server


def level_answers(port: int, rate: float, multiple: int, *, args) -> list[list[Any]]:
    """One open-loop level's raw answers."""
    res = client(level_job(port, rate, multiple, args=args))
    time.sleep(DRAIN_S)
    return res["answers"]


def run_level(port: int, rate: float, multiple: int, *, args, capacity: float,
              capacity_forward_ms: float | None) -> dict[str, Any]:
    before = device_counters(port)
    res = client(level_job(port, rate, multiple, args=args))
    # read once every answer is in (the device has run all it will for this level), over
    # the client's own span: its first send to its last answer
    after = device_counters(port)
    time.sleep(DRAIN_S)
    answers = res["answers"]
    out = summarize(answers, sent=len(answers), seconds=args.seconds, capacity=capacity,
                    deadline_s=args.deadline_ms / 1000.0)
    out["device"] = level_device(before, after, seconds=res["wall_s"],
                                 capacity_forward_ms=capacity_forward_ms)
    return out


def level_device(before: dict[str, float] | None, after: dict[str, float] | None, *,
                 seconds: float, capacity_forward_ms: float | None) -> dict[str, Any] | None:
    """What the device did for one level (``benchmarks._device_status.compute_delta``: its
    batches, their mean forward time, its busy share over the load client's span, ``seconds``),
    and that forward time over the capacity run's (``forward_vs_capacity``; None without one):
    above 1, each forward took longer than when the capacity was measured, and at most its
    inverse of the capacity was left to serve.

    >>> level_device({"chunks": 0, "compute_s": 0.0}, {"chunks": 360, "compute_s": 7.92},
    ...              seconds=8.0, capacity_forward_ms=20.0)
    {'batches': 360, 'forward_ms': 22.0, 'busy_share': 0.99, 'forward_vs_capacity': 1.1}
    """
    out = compute_delta(before, after, seconds=seconds)
    if out is not None:
        fwd = out["forward_ms"]
        out["forward_vs_capacity"] = (round(fwd / capacity_forward_ms, 3)
                                      if fwd and capacity_forward_ms else None)
    return out


def run_arm(repo: Path, *, edge: bool, args, capacity: float | None,
            capacity_forward_ms: float | None = None) -> dict[str, Any]:
    """One uvicorn arm at every level. With no ``capacity`` it is measured first (closed
    loop), with the device's forward time meanwhile (``capacity_device``); each level's
    forward time is read against ``capacity_forward_ms``, or against that one."""
    server = Server(repo, edge=edge, deadline_ms=args.deadline_ms,
                    edge_json=json.dumps(args.edge_overrides) if edge else None)
    try:
        measured = None
        if capacity is None:
            before = device_counters(server.port)
            cap = client({"mode": "closed", "port": server.port, "path": PATH, "concurrency": 8,
                          "seconds": args.capacity_seconds,
                          "body": {"interactive": body("interactive", 60_000)}})
            ok = [a for a in cap["answers"] if a[2] == 200 and not a[3]]
            capacity = len(ok) / args.capacity_seconds
            # the device's forward time while the capacity was measured: each level's is
            # read against it (``level_device``)
            measured = compute_delta(before, device_counters(server.port),
                                     seconds=cap["wall_s"])
            capacity_forward_ms = measured["forward_ms"] if measured else None
        levels = {f"{m}x": run_level(server.port, m * capacity, m, args=args, capacity=capacity,
                                     capacity_forward_ms=capacity_forward_ms)
                  for m in LEVELS}
        out = {"capacity_rps": round(capacity, 1), "levels": levels}
        if measured is not None:
            out["capacity_device"] = measured
        return out
    finally:
        server.stop()


def targets(arm: dict[str, Any], deadline_ms: float) -> dict[str, Any]:
    rt1 = arm["levels"]["1x"]["classes"]["realtime"]["served_p99_ms"] or 0.0
    out = {}
    for name, lv in arm["levels"].items():
        c = lv["classes"]
        rt = c["realtime"]["served_p99_ms"]
        checks = {
            "goodput_ge_95pct_capacity": lv["goodput_vs_capacity"] >= GOODPUT_MIN,
            "realtime_p99_within_1x_plus_50ms": rt is not None and rt <= rt1 + RT_SLACK_S * 1e3,
            "realtime_p99_within_deadline": rt is not None and rt <= deadline_ms,
            "shed_answered_within_50ms": lv["shed"] == 0 or lv["shed_max_ms"] <= SHED_MAX_S * 1e3,
            "refused_order_batch_interactive_realtime": (
                c["batch"]["refused_share"] >= c["interactive"]["refused_share"]
                >= c["realtime"]["refused_share"]),
            "sent_eq_answered": lv["sent"] == lv["answered"],
        }
        out[name] = {**checks, "all": all(checks.values())}
    return out


RAY_MODES = ("proxy", "listener", "direct", "proxy_served")
# the two paths issue 38's targets name: behind Ray's proxy and behind Timeshare's listener
TARGET_RAY_MODES = ("proxy", "listener")
RAY_ARM_KEYS = {"proxy": "edge_behind_ray_proxy", "listener": "edge_behind_ray_listener",
                "direct": "edge_behind_ray_direct_ingress",
                "proxy_served": "edge_behind_ray_proxy_served_settings"}


def _ray_env(mode: str) -> dict[str, str]:
    """The Ray settings each mode runs under (``proxy``: Ray's defaults)."""
    return {"proxy": {}, "listener": dict(ENV), "proxy_served": dict(ENV),
            "direct": {**ENV, "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}}[mode]


def _ray_arm(mode: str, repo: Path, tmp: Path, *, args, capacity: float,
             capacity_forward_ms: float | None) -> dict[str, Any]:
    env = _ray_env(mode)
    try:
        return run_ray_arm(
            repo, tmp, deadline_ms=args.deadline_ms, levels=LEVELS,
            edge_overrides=args.edge_overrides, capacity=capacity, ray_env=env,
            direct=mode == "direct", listener=mode == "listener",
            run_level=lambda port, rate, m: run_level(
                port, rate, m, args=args, capacity=capacity,
                capacity_forward_ms=capacity_forward_ms))
    except Exception as e:  # noqa: BLE001 - reported; meets_targets then fails for it
        return {"error": f"{type(e).__name__}: {e}"}


# the Ray modes with Serve's proxy in front: each gets the no-op ceiling under its settings
PROXY_MODES = ("proxy", "proxy_served")


def _ceiling(mode: str, *, args, capacity: float) -> dict[str, Any]:
    """A no-op deployment behind Serve's proxy under ``mode``'s Ray settings, the same schedules
    (``benchmarks._proxy_ceiling``): what the proxy carries at all at each level."""
    limit = EdgeSettings(**args.edge_overrides).ingress_max_ongoing_requests
    try:
        return run_ceiling(
            ray_env=_ray_env(mode), levels=LEVELS, capacity=capacity,
            max_ongoing_requests=limit,
            run_level=lambda port, rate, m: ceiling_summary(
                level_answers(port, rate, m, args=args), seconds=args.seconds,
                capacity=capacity, deadline_s=args.deadline_ms / 1000.0, shed_s=SHED_MAX_S))
    except Exception as e:  # noqa: BLE001 - reported beside the arm it explains
        return {"error": f"{type(e).__name__}: {e}"}


def _beside_ceiling(arms: dict[str, Any], ceilings: dict[str, Any]) -> dict[str, Any]:
    """Per proxy arm and level: Timeshare's goodput beside the no-op's answers in time, both
    over Timeshare's capacity; the no-op's share back within the deadline and within the 50 ms
    a shed answer is allowed; whether the no-op got 95 % back within the deadline (where it
    did not, the proxy cannot carry that level for any app); and the no-op's p99 beside the
    bound Timeshare's realtime p99 is held to there (its 1x p99 + 50 ms; where the no-op's own
    p99 is past it, no app's realtime answers can meet it behind that proxy)."""
    out: dict[str, Any] = {}
    for mode, ceiling in ceilings.items():
        arm = arms.get(mode, {})
        if "levels" not in ceiling or "levels" not in arm:
            continue
        rt1 = arm["levels"]["1x"]["classes"]["realtime"]["served_p99_ms"] or 0.0
        bound = round(rt1 + RT_SLACK_S * 1e3, 1)
        out[RAY_ARM_KEYS[mode]] = {name: {
            "timeshare_goodput_vs_capacity": lv["goodput_vs_capacity"],
            "noop_in_deadline_vs_capacity": ceiling["levels"][name]["in_deadline_vs_capacity"],
            "noop_in_deadline_share": ceiling["levels"][name]["in_deadline_share"],
            "noop_within_shed_limit_share": ceiling["levels"][name]["within_shed_limit_share"],
            "proxy_carries_level": ceiling["levels"][name]["in_deadline_share"] >= GOODPUT_MIN,
            "timeshare_realtime_p99_ms": lv["classes"]["realtime"]["served_p99_ms"],
            "realtime_p99_bound_ms": bound,
            "noop_p99_ms": ceiling["levels"][name]["p99_ms"],
            "noop_p99_within_realtime_bound": (ceiling["levels"][name]["p99_ms"] is not None
                                               and ceiling["levels"][name]["p99_ms"] <= bound),
        } for name, lv in arm["levels"].items()}
    return out


def _ray_targets(arms: dict[str, Any], deadline_ms: float) -> dict[str, Any]:
    """Each Ray arm's checks (an arm that failed to run has none and fails)."""
    return {m: (targets(a, deadline_ms) if "levels" in a else {"ran": {"all": False}})
            for m, a in arms.items()}


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--seconds", type=float, default=8.0, help="Open-loop seconds per level.")
    ap.add_argument("--capacity-seconds", type=float, default=4.0)
    ap.add_argument("--device-ms", type=float, default=20.0)
    ap.add_argument("--deadline-ms", type=float, default=500.0)
    ap.add_argument("--ray", action=argparse.BooleanOptionalAction, default=True,
                    help="Also run the edge inside Ray Serve (every level): behind Serve's "
                         "proxy and behind Timeshare's listener (issue 38's targets).")
    ap.add_argument("--ray-modes", nargs="+", choices=RAY_MODES,
                    default=list(TARGET_RAY_MODES),
                    help="Behind Ray: 'proxy' (Serve's proxy, Ray's default settings), "
                         "'listener' (Timeshare's listener in the ingress replica, the settings "
                         "`make serve` uses), 'direct' (those settings with Serve's direct "
                         "ingress: the client on the replica's own port; not a target) and/or "
                         "'proxy_served' (Serve's proxy under the settings `make serve` uses; "
                         "not a target).")
    ap.add_argument("--ceiling", action=argparse.BooleanOptionalAction, default=True,
                    help="Beside each arm behind Serve's proxy, run a no-op Serve deployment "
                         "behind the same proxy, same settings and schedules: what the proxy "
                         "carries at all (not a target; it says whose the shortfall is).")
    ap.add_argument("--ray-only", type=float, default=None, metavar="CAPACITY_RPS",
                    help="Run only the Ray arms, at this capacity (from an earlier full run).")
    ap.add_argument("--edge-json", dest="edge_overrides", type=json.loads,
                    default=EDGE_OVERRIDES, metavar="JSON",
                    help="Overrides of the edge's settings (``edge:``), e.g. "
                         "'{\"admission\": {\"max_queue_delay_s\": {...}}}'; default: none.")
    ap.add_argument("--class-headers", action="store_true",
                    help="Also send each request's class and deadline as the headers "
                         "Timeshare-Priority and Timeshare-Deadline-Ms (the body keeps them): "
                         "the edge then decides before it reads the body, which behind Serve's "
                         "proxy is a call back to the proxy. Default: in the body only.")
    ap.add_argument("--request-start", action="store_true",
                    help="Stamp each request X-Request-Start (its planned send time, Unix "
                         "seconds), as a front proxy such as nginx does: the edge then starts "
                         "its deadline there, so the wait in front of it (Serve's proxy and "
                         "its queue) counts. Default: no stamp.")
    ap.add_argument("--demo-repo", default=None,
                    help="An existing demo repository with iris-mlp2x16 (else one is built).")
    return ap.parse_args()


def _setup(args: argparse.Namespace) -> dict[str, Any]:
    """The settings every run reports (the full run adds its levels and server)."""
    return {"device_ms": args.device_ms, "edge_overrides": args.edge_overrides,
            "deadline_ms": args.deadline_ms, "mix": MIX, "seconds_per_level": args.seconds,
            "class_in_headers": bool(args.class_headers),
            "request_start_stamped": bool(args.request_start)}


def _ceilings(arms: dict[str, Any], ceilings: dict[str, Any]) -> dict[str, Any]:
    """The no-op ceiling runs and their comparison, as the JSON object carries them."""
    if not ceilings:
        return {}
    return {"proxy_ceiling": {RAY_ARM_KEYS[m]: c for m, c in ceilings.items()},
            "beside_proxy_ceiling": _beside_ceiling(arms, ceilings)}


def _ray_only_result(arms: dict[str, Any], ceilings: dict[str, Any],
                     args: argparse.Namespace, t0: float) -> dict[str, Any]:
    t_ray = _ray_targets(arms, args.deadline_ms)
    return {"benchmark": "overload_http", "ray_only": True, "capacity_rps": args.ray_only,
            "setup": _setup(args), **{RAY_ARM_KEYS[m]: a for m, a in arms.items()},
            **_ceilings(arms, ceilings),
            "targets": {RAY_ARM_KEYS[m]: t for m, t in t_ray.items()},
            # (a Ray-only run has no edge arm: its verdict covers the Ray arms alone)
            "meets_targets": all(lv["all"] for t in t_ray.values() for lv in t.values()),
            "wall_s": round(time.monotonic() - t0, 1)}


def _result(base: dict[str, Any], edge: dict[str, Any], ray_arms: dict[str, Any],
            ceilings: dict[str, Any], args: argparse.Namespace, t0: float) -> dict[str, Any]:
    """The full run's JSON object: both arms, the Ray arms, targets and ratios per level."""
    t_edge, t_base = targets(edge, args.deadline_ms), targets(base, args.deadline_ms)
    t_ray = _ray_targets(ray_arms, args.deadline_ms)
    missing = [m for m in TARGET_RAY_MODES if m not in ray_arms]
    ratios = {k: {"goodput_edge_over_baseline": round(
                      edge["levels"][k]["goodput_rps"] / max(base["levels"][k]["goodput_rps"],
                                                             1e-9), 2)}
              for k in edge["levels"]}
    return {
        "benchmark": "overload_http",
        "setup": {**_setup(args), "levels": list(LEVELS),
                  "server": "router.ingress.Ingress under uvicorn, in-process CPU pool; "
                            "Ray Serve's proxy not in the path",
                  "cpus": os.cpu_count(), "cpu_model": cpu_model()},
        "capacity_rps": base["capacity_rps"],
        # the device's mean forward while the capacity was measured (each level's ``device``
        # compares its own with it)
        "capacity_forward_ms": (base.get("capacity_device") or {}).get("forward_ms"),
        "edge": edge, "baseline": base,
        **{RAY_ARM_KEYS[m]: a for m, a in ray_arms.items()},
        **_ceilings(ray_arms, ceilings),
        "targets": {"edge": t_edge, "baseline": t_base,
                    **{RAY_ARM_KEYS[m]: t for m, t in t_ray.items()}},
        "ratios": ratios,
        # issue 38: every level, uvicorn alone and behind Ray's proxy and Timeshare's listener
        # (a run without those Ray arms cannot meet it: they are named in target_arms_missing)
        "meets_targets": not missing and all(lv["all"] for lv in t_edge.values()) and all(
            lv["all"] for m in TARGET_RAY_MODES for lv in t_ray[m].values()),
        "target_arms_missing": missing,
        "baseline_meets_targets": all(lv["all"] for lv in t_base.values()),
        "wall_s": round(time.monotonic() - t0, 1),
    }


def _ray_arms(repo: Path, tmp: Path, *, args, capacity: float,
              capacity_forward_ms: float | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each requested Ray arm, and for those behind Serve's proxy the no-op ceiling under the
    same settings (``--ceiling``), one Ray instance at a time."""
    arms = {m: _ray_arm(m, repo, tmp, args=args, capacity=capacity,
                        capacity_forward_ms=capacity_forward_ms) for m in args.ray_modes}
    ceilings = {m: _ceiling(m, args=args, capacity=capacity)
                for m in args.ray_modes if m in PROXY_MODES and args.ceiling}
    return arms, ceilings


def main() -> None:
    args = _parse_args()
    t0 = time.monotonic()
    # stdout keeps the one JSON object (Ray's driver writes there)
    with stdout_to_stderr(), tempfile.TemporaryDirectory(prefix="ts-ovl-") as tmp:
        repo = Path(tmp) / "repo"
        if args.demo_repo:
            shutil.copytree(Path(args.demo_repo) / "iris-mlp2x16", repo / "iris-mlp2x16")
        else:
            build_demo_repository(repo, only=["iris-mlp2x16"])
        make_device_model(repo, device_ms=args.device_ms)
        if args.ray_only is not None:  # the Ray arms alone, at a capacity measured before
            arms, ceilings = _ray_arms(repo, Path(tmp), args=args, capacity=args.ray_only)
            result = _ray_only_result(arms, ceilings, args, t0)
        else:
            base = run_arm(repo, edge=False, args=args, capacity=None)
            capacity = base["capacity_rps"]
            forward_ms = (base.get("capacity_device") or {}).get("forward_ms")
            edge = run_arm(repo, edge=True, args=args, capacity=capacity,
                           capacity_forward_ms=forward_ms)
            arms, ceilings = (_ray_arms(repo, Path(tmp), args=args, capacity=capacity,
                                        capacity_forward_ms=forward_ms)
                              if args.ray else ({}, {}))
            result = _result(base, edge, arms, ceilings, args, t0)
    emit(result, args.json)


if __name__ == "__main__":
    main()
