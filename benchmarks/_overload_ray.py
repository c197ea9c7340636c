"""The hop Timeshare does not control: the same edge behind Ray Serve's proxy.

Used by ``benchmarks.overload_http --ray``: the app as ``serve run`` builds it
(``router.app.build_from_settings``, the ingress with ``max_ongoing_requests`` /
``max_queued_requests`` from ``edge`` settings, the CPU pool in the ingress), on a local Ray
instance started here and stopped after. The client is the same open-loop process; every answer
carries the edge's ``Server-Timing: edge;dur=``, so the time spent in front of the edge (client,
loopback, Ray's proxy and its queue, the replica's ASGI bridge) is measured per request. Each
level also reports where the host's CPU went (``cpu``: the ingress replica's and the proxy's
cores, from ``/proc``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from benchmarks._overload_server import DEVICE_MODEL, PATH, infer_body
from benchmarks._proc_cpu import (
    host_cpu_s,
    pids_matching,
    process_cpu_s,
    thread_cpu_s,
    thread_shares,
)

__all__ = ["run_ray_arm"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, timeout_s: float = 120.0) -> None:
    stop = time.monotonic() + timeout_s
    while time.monotonic() < stop:
        try:
            r = httpx.get(f"{url}/v2/models/{DEVICE_MODEL}/ready", timeout=2)
            if r.status_code == 200 and r.json().get("ready"):
                for _ in range(5):
                    httpx.post(url + PATH, content=infer_body("interactive", 5000), timeout=10)
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("Ray Serve app not ready")


def _metered(run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()``'s level summary with where the host's CPU went meanwhile (``cpu``): cores used
    by the ingress replica and by Serve's proxy (their busiest threads too), and the host's
    busy share of all its cores (the rest: the client, Ray's own processes)."""
    procs = {"ingress": pids_matching("ServeReplica:timeshare:Ingress"),
             "proxy": pids_matching("ProxyActor")}
    pids = {name: found[0] for name, found in procs.items() if len(found) == 1}
    before = {name: (process_cpu_s(pid), thread_cpu_s(pid)) for name, pid in pids.items()}
    host0, t0 = host_cpu_s(), time.monotonic()
    out = run()
    wall = time.monotonic() - t0
    host1 = host_cpu_s()
    cpu: dict[str, Any] = {}
    for name, pid in pids.items():
        total0, threads0 = before[name]
        total1 = process_cpu_s(pid)
        cpu[name] = {"cores": (round((total1 - total0) / wall, 3)
                               if total0 is not None and total1 is not None else None),
                     "threads": thread_shares(threads0, thread_cpu_s(pid), wall, top=3)}
    if host0 is not None and host1 is not None and host1[1] > host0[1]:
        cpu["host_busy_share"] = round((host1[0] - host0[0]) / (host1[1] - host0[1]), 3)
    return {**out, "cpu": cpu}


def run_ray_arm(repo: Path, state_dir: Path, *, deadline_ms: float, levels: tuple[int, ...],
                capacity: float, run_level: Callable[[int, float, int], dict[str, Any]],
                edge_overrides: dict[str, Any] | None = None,
                ray_env: dict[str, str] | None = None, direct: bool = False,
                listener: bool = False) -> dict[str, Any]:
    """``run_level(port, rate, multiple)`` runs one open-loop level and returns its summary.
    ``ray_env``: Ray Serve settings for this Ray instance (set before it starts, restored
    after); ``direct``: the client talks to the ingress replica's own port (direct ingress)
    instead of Serve's proxy; ``listener``: to Timeshare's own listener in the ingress replica
    (``router.listener``, what ``deploy/config.yaml`` serves)."""
    import os

    import ray
    from ray import serve

    from common.trust import TrustSettings
    from router.app import build_from_settings
    from router.edge import EdgeSettings
    from router.listener import ListenerSettings
    from router.settings import AppSettings, CallLogSettings, CpuPoolSettings

    port = _port()
    listener_port = _port() if listener else None
    saved = {k: os.environ.get(k) for k in (ray_env or {})}
    os.environ.update(ray_env or {})
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        settings = AppSettings(
            repository=str(repo), state_dir=str(state_dir), default_deadline_ms=deadline_ms,
            cpu_pool=CpuPoolSettings(placement="ingress", memory_budget_mb=256, threads=1),
            call_log=CallLogSettings(path=str(state_dir / "calllog.jsonl")),
            edge=EdgeSettings(**(edge_overrides or {})),
            listener=ListenerSettings(port=listener_port),
            # as the uvicorn server does: the chaos factory its device-bound model names
            trust=TrustSettings(allowed_modules=("deploy.demo_models", "deploy.chaos")))
        serve.run(build_from_settings(settings), name="timeshare", route_prefix="/")
        if direct:
            from benchmarks._serve_net import replica_port

            port = replica_port("timeshare")
        elif listener_port is not None:
            port = listener_port
        _wait_ready(f"http://127.0.0.1:{port}")
        edge = settings.edge
        path = "direct ingress" if direct else "listener" if listener else "proxy"
        return {
            "ray_env": dict(ray_env or {}), "path": path,
            "ingress_max_ongoing_requests": edge.ingress_max_ongoing_requests,
            "ingress_max_queued_requests": edge.ingress_max_queued_requests,
            "levels": {f"{m}x": _metered(partial(run_level, port, m * capacity, m))
                       for m in levels}}
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
