"""What Serve's proxy carries at all: a no-op deployment behind it, the same open-loop schedules.

Used by ``benchmarks.overload_http`` beside each arm behind Serve's proxy (``proxy``,
``proxy_served``): the cheapest app a peer could put behind that proxy (it reads the JSON body,
as the edge does, and answers 200 at once; no model, no queue) under the same Ray settings and
the same ``num_cpus``, driven by the same client at the same rates and seeds. Every request an
overloaded Timeshare sheds still crosses the proxy twice, so where this no-op does not get its
answers back within the deadline, no app behind that proxy can: the level's shortfall is the
proxy's, and the figures say so beside Timeshare's (``benchmarks.overload_http``'s
``proxy_ceiling``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import numpy as np

from benchmarks._overload_server import PATH, infer_body
from benchmarks._proc_cpu import metered
from benchmarks._serve_net import free_port, local_serve
from deploy.ray_env import served_logging_config

__all__ = ["ceiling_summary", "run_ceiling"]

_APP = "ceiling"
# a Timeshare-shaped answer (v2 JSON, one small output), so the response costs what one does
_ANSWER = json.dumps({"model_name": "device-bound", "outputs": [
    {"name": "logits", "datatype": "FP32", "shape": [1, 3], "data": [0.0, 0.0, 0.0]}]}).encode()


def _noop_app(max_ongoing_requests: int) -> Any:
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import Response

    @serve.deployment(name="Noop", max_ongoing_requests=max_ongoing_requests)
    class Noop:
        async def __call__(self, request: Request) -> Response:
            json.loads(await request.body())
            return Response(_ANSWER, media_type="application/json")

    return Noop.bind()  # type: ignore[attr-defined]


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1e3, 1) if values else None


def ceiling_summary(answers: list[list[Any]], *, seconds: float, capacity: float,
                    deadline_s: float, shed_s: float) -> dict[str, Any]:
    """One level of the no-op behind the proxy: how many answers came back at all, within
    ``shed_s`` (what a shed answer must meet) and within the deadline, and that in-deadline rate
    over Timeshare's measured capacity (comparable with a Timeshare level's goodput)."""
    ok = [a[1] for a in answers if a[2] == 200]
    in_time = sum(1 for t in ok if t <= deadline_s)
    sent = len(answers)
    return {
        "sent": sent, "answered_200": len(ok),
        "in_deadline_share": round(in_time / max(sent, 1), 3),
        "within_shed_limit_share": round(sum(1 for t in ok if t <= shed_s) / max(sent, 1), 3),
        "in_deadline_vs_capacity": round(in_time / seconds / capacity, 3),
        "p50_ms": _p(ok, 50), "p99_ms": _p(ok, 99)}


def _wait_ready(url: str, timeout_s: float = 60.0) -> None:
    stop = time.monotonic() + timeout_s
    while time.monotonic() < stop:
        try:
            body = infer_body("interactive", 500)
            if httpx.post(url, content=body, timeout=5).status_code == 200:
                for _ in range(20):  # warm the proxy's and the replica's paths
                    httpx.post(url, content=body, timeout=5)
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the no-op ceiling app did not answer")


def run_ceiling(*, ray_env: dict[str, str], levels: tuple[int, ...], capacity: float,
                max_ongoing_requests: int,
                run_level: Callable[[int, float, int], dict[str, Any]]) -> dict[str, Any]:
    """The no-op behind Serve's proxy on a fresh local Ray instance (``ray_env`` set before it
    starts, restored after): ``run_level(port, rate, multiple)`` runs one level and gives its
    figures (:func:`ceiling_summary`'s)."""
    from ray import serve

    port = free_port()
    with local_serve(ray_env, port):
        # the logging settings Timeshare's arm is served with (deploy/config.yaml's)
        serve.run(_noop_app(max_ongoing_requests), name=_APP, route_prefix="/",
                  logging_config=served_logging_config())
        _wait_ready(f"http://127.0.0.1:{port}{PATH}")
        procs = {"replica": f"ServeReplica:{_APP}", "proxy": "ProxyActor"}
        out = {f"{m}x": metered(partial(run_level, port, m * capacity, m), procs)
               for m in levels}
    return {"app": "a no-op Serve deployment (reads the JSON body, answers 200)",
            "ray_env": dict(ray_env), "max_ongoing_requests": max_ongoing_requests,
            "levels": out}
