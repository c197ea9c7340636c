"""The hop Timeshare does not control: the same edge behind Ray Serve's proxy.

Used by ``benchmarks.overload_http --ray``: the app as ``serve run`` builds it
(``router.app.build_from_settings``, the ingress with ``max_ongoing_requests`` /
``max_queued_requests`` from ``edge`` settings, the CPU pool in the ingress, the application's
``logging_config`` from ``deploy/config.yaml``), on a local Ray
instance started here and stopped after. The client is the same open-loop process; every answer
carries the edge's ``Server-Timing: edge;dur=``, so the time spent in front of the edge (client,
loopback, Ray's proxy and its queue, the replica's ASGI bridge) is measured per request. Each
level also reports where the host's CPU went (``cpu``: the ingress replica's and the proxy's
cores, from ``/proc``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from benchmarks._overload_server import DEVICE_MODEL, PATH, infer_body
from benchmarks._proc_cpu import metered
from benchmarks._serve_net import free_port, local_serve, replica_port
from common.trust import TrustSettings
from deploy.ray_env import served_logging_config
from router.app import build_from_settings
from router.edge import EdgeSettings
from router.listener import ListenerSettings
from router.settings import AppSettings, CallLogSettings, CpuPoolSettings

__all__ = ["run_ray_arm"]


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


# the processes an overload level meters (``benchmarks._proc_cpu.metered``)
PROCS = {"ingress": "ServeReplica:timeshare:Ingress", "proxy": "ProxyActor"}


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
    from ray import serve

    port = free_port()
    listener_port = free_port() if listener else None
    with local_serve(ray_env or {}, port):
        settings = AppSettings(
            repository=str(repo), state_dir=str(state_dir), default_deadline_ms=deadline_ms,
            cpu_pool=CpuPoolSettings(placement="ingress", memory_budget_mb=256, threads=1),
            call_log=CallLogSettings(path=str(state_dir / "calllog.jsonl")),
            edge=EdgeSettings(**(edge_overrides or {})),
            listener=ListenerSettings(port=listener_port),
            # as the uvicorn server does: the chaos factory its device-bound model names
            trust=TrustSettings(allowed_modules=("deploy.demo_models", "deploy.chaos")))
        # the app's own logging settings, as deploy/config.yaml gives them (Serve's access
        # line off in its replicas); Ray's process settings stay ``ray_env``'s
        serve.run(build_from_settings(settings), name="timeshare", route_prefix="/",
                  logging_config=served_logging_config())
        if direct:
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
            "levels": {f"{m}x": metered(partial(run_level, port, m * capacity, m), PROCS)
                       for m in levels}}
