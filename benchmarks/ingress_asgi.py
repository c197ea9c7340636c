"""The ingress's whole ASGI app in-process, with no HTTP server: what Timeshare's own request path
costs per request, apart from any server (evidence for docs/PERFORMANCE.md, not a benchmark).

    python -m benchmarks.ingress_asgi --json out.json [--seconds 5] [--concurrency 16] [--profile]

Builds the real ``router.ingress.Ingress`` (its own ``__init__``, as ``benchmarks._overload_server``
does: in-process CPU pool on its device thread, edge on) over ``digits-small`` and calls the ASGI
app its listener serves (``router.edge.outside``: the edge in front of FastAPI's layers)
directly from ``--concurrency`` tasks on one uvloop loop, cache bypassed and then as a cache
hit. Reports requests/s and CPU µs per request (wall time over requests, one loop); with
``--profile`` the top cProfile entries by self time (profiling roughly doubles every figure).
Runs under ``make serve``'s thread settings (``deploy.ray_env.THREAD_ENV``, e.g.
``OMP_WAIT_POLICY=PASSIVE``) unless the environment sets them, so its figures compare with the
served ones; they are reported as ``thread_env``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._output import emit, stdout_to_stderr
from deploy.ray_env import THREAD_ENV

PATH = "/v2/models/digits-small/infer"


def _scope(body: bytes) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
            "scheme": "http", "path": PATH, "raw_path": PATH.encode(), "root_path": "",
            "query_string": b"", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2),
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}


async def _one(app, body: bytes) -> None:
    delivered = False

    async def receive() -> dict:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect while the answer is written
        return {}

    status: list[int] = []

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(_scope(body), receive, send)
    if status != [200]:
        raise RuntimeError(f"status {status}")


async def _arm(app, body: bytes, args: argparse.Namespace) -> dict[str, Any]:
    for _ in range(300):
        await _one(app, body)
    n = 0
    stop = time.perf_counter() + args.seconds

    async def worker() -> None:
        nonlocal n
        while time.perf_counter() < stop:
            await _one(app, body)
            n += 1

    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof:
        prof.enable()
    await asyncio.gather(*[worker() for _ in range(args.concurrency)])
    if prof:
        prof.disable()
    dt = time.perf_counter() - t0
    out: dict[str, Any] = {"requests": n, "rps": round(n / dt, 1),
                           "us_per_request": round(1e6 * dt / n, 1), "profiled": bool(prof)}
    if prof:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        out["top_self_time"] = text.getvalue().splitlines()[-30:]
    return out


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks._overload_server import _build
    from benchmarks.http_throughput import _body, _repository
    from router.edge import outside

    root = Path(tempfile.mkdtemp(prefix="timeshare-asgi-"))
    repo, _, _ = _repository(root, "digits-small")
    # what the listener serves (router.ingress): the edge in front of FastAPI's layers
    app = outside(await _build(str(repo), str(root / "state"), edge=True, deadline_ms=1000))
    # What a Serve replica does once its constructor returns (RAY_SERVE_FREEZE_GC_ON_STARTUP,
    # on by default in Ray 2.60): collect, then keep start-up objects out of every later scan.
    gc.collect()
    gc.freeze()
    x = np.random.default_rng(0).standard_normal([1, 64]).astype(np.float32)
    return {"benchmark": "ingress_asgi", "concurrency": args.concurrency,
            "seconds": args.seconds,
            "thread_env": {k: os.environ.get(k) for k in THREAD_ENV},
            "gc_frozen_after_start": True,
            "cache_bypassed": await _arm(app, _body("pixels", x, bypass=True), args),
            "cache_hit": await _arm(app, _body("pixels", x, bypass=False), args)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args(argv)
    if "torch" in sys.modules:  # libgomp reads its settings once, when torch loads
        raise RuntimeError("ingress_asgi must set the thread environment before torch loads")
    for k, v in THREAD_ENV.items():
        os.environ.setdefault(k, v)
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    with stdout_to_stderr():
        result = asyncio.run(_run(args))
    emit(result, args.json)


if __name__ == "__main__":
    main()
