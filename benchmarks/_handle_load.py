"""The handle arms of ``benchmarks.http_throughput`` (Timeshare's typed handle against the stock
deployment's, closed loop), and the latency summary every arm shares."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._proc_cpu import process_cpu_s

__all__ = ["handle_ratios", "handle_runs", "latency_stats"]


def latency_stats(lat_s: list[float], duration_s: float, n_errors: int) -> dict[str, Any]:
    """Answers, throughput over ``duration_s`` and latency percentiles (ms) of ``lat_s``."""
    if not lat_s:
        return {"n": 0, "n_errors": n_errors, "throughput_rps": 0.0}
    ms = np.asarray(lat_s) * 1e3
    return {"n": int(ms.size), "n_errors": n_errors,
            "throughput_rps": round(ms.size / duration_s, 1),
            "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(ms.mean()), 3)}


async def _closed(call, concurrency: int, duration_s: float, warmup_s: float,
                  replica: int | None = None) -> dict:
    """A closed loop of ``concurrency`` callers; with ``replica`` (the answering replica's
    pid), the CPU per answer of that replica and of this caller process over the measured
    window (both sides of a handle call: Ray's own work is most of it)."""
    import asyncio

    lat: list[float] = []
    start = time.perf_counter()
    measure_from, stop = start + warmup_s, start + warmup_s + duration_s
    cpu: dict[str, float | None] = {}

    async def meter() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        cpu["replica0"] = process_cpu_s(replica) if replica is not None else None
        cpu["caller0"] = time.process_time()

    async def worker() -> None:
        while (t0 := time.perf_counter()) < stop:
            await call()
            if t0 >= measure_from:
                lat.append(time.perf_counter() - t0)

    await asyncio.gather(meter(), *(worker() for _ in range(concurrency)))
    out = latency_stats(lat, duration_s, 0)
    n = len(lat)
    r0, r1 = cpu.get("replica0"), process_cpu_s(replica) if replica is not None else None
    c0 = cpu.get("caller0")
    if n and r0 is not None and r1 is not None and c0 is not None:
        out["replica_cpu_us_per_answer"] = round((r1 - r0) / n * 1e6, 1)
        out["caller_cpu_us_per_answer"] = round((time.process_time() - c0) / n * 1e6, 1)
    return out


def _replica_pid(app: str) -> int | None:
    """The pid of ``app``'s one ingress replica (``ray::ServeReplica:<app>:...``; None: not
    exactly one, or no ``/proc``)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = stat.read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith(f"ray::ServeReplica:{app}:{_INGRESS[app]}"):
            pids.append(int(stat.parent.name))
    return pids[0] if len(pids) == 1 else None


_INGRESS = {"timeshare": "Ingress", "stock": "Stock"}


def handle_runs(args: argparse.Namespace, in_name: str, x: np.ndarray,
                device: Callable[[], Any] | None = None,
                device_delta: Callable[[Any, Any], Any] | None = None) -> dict:
    """Closed loops at c=1 and c=16 over each app's handle (``args.model``, ``args.handle_s``).

    Timeshare's arms call through its typed client (``router.client.TimeshareClient``, the
    documented way in: concurrent calls share handle calls, ``Ingress.infer_many``);
    ``timeshare_raw`` calls the bare handle (``ts.infer.remote``, one Ray call per request), as
    stock's arm does. Each arm also reports the handle calls it made (``handle_calls``).
    Every arm pickles its calls with plain pickle, as the typed client does by default: on
    Serve's gRPC transport (these runs' settings) it is the fastest way a capable caller has
    to send a numpy array, so stock's handle gets it too.

    ``device`` / ``device_delta``: read Timeshare's CPU pool counters and what they did over
    a run (``benchmarks.http_throughput``), as the HTTP arms report them (``device``).
    """
    import asyncio

    from ray import serve

    from router.client import TimeshareClient
    from router.schemas import CacheControl, InferenceRequest

    async def all_runs() -> dict:
        # one event loop for every run: with Serve's router on the caller's loop
        # (RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0, throughput-optimized mode) a handle is bound
        # to the loop it was first used on
        ts, stock = (serve.get_app_handle(app).options(request_serialization="pickle",
                                                       response_serialization="pickle")
                     for app in ("timeshare", "stock"))
        client = TimeshareClient(ts)
        bypass = CacheControl(skip_read=True, skip_write=True)
        calls = {
            "timeshare": lambda: client.infer_async(args.model, {in_name: x}, cache=bypass),
            "timeshare_hit": lambda: client.infer_async(args.model, {in_name: x}),
            "timeshare_raw": lambda: ts.infer.remote(InferenceRequest(
                model=args.model, inputs={in_name: x}, cache=bypass)),
            "stock": lambda: stock.infer.remote(x),
        }
        pids = {a: _replica_pid("stock" if a == "stock" else "timeshare") for a in calls}
        out: dict[str, dict] = {}
        for arm, call in calls.items():
            out[arm] = {}
            for c in (1, 16):
                before = client.coalescing()
                pool0 = device() if device and arm != "stock" else None
                r = await _closed(call, c, args.handle_s, 1.0, pids[arm])
                after = client.coalescing()
                if pool0 is not None and device and device_delta:
                    r["device"] = device_delta(pool0, device())
                if arm not in ("timeshare_raw", "stock"):
                    r["handle_calls"] = after["calls"] - before["calls"]
                    r["requests_sent"] = after["requests"] - before["requests"]
                out[arm][f"c{c}"] = r
        return out

    return asyncio.run(all_runs())


def handle_ratios(handle: dict) -> dict[str, float]:
    """Timeshare's handle figures over stock's (none when the handle runs failed)."""
    if "error" in handle:
        return {}
    ts, stock = handle["timeshare"], handle["stock"]
    out = {"handle_c1_p50_vs_stock": round(ts["c1"]["p50_ms"] / stock["c1"]["p50_ms"], 3),
           "handle_c16_rps_vs_stock": round(ts["c16"]["throughput_rps"]
                                            / stock["c16"]["throughput_rps"], 3)}
    raw = handle.get("timeshare_raw")
    if raw:  # the bare handle, one Ray call per request: not a target, the client's share
        out["handle_raw_c16_rps_vs_stock"] = round(raw["c16"]["throughput_rps"]
                                                   / stock["c16"]["throughput_rps"], 3)
    key = "replica_cpu_us_per_answer"
    for arm in ("timeshare", "timeshare_hit", "timeshare_raw"):
        mine, theirs = handle.get(arm, {}).get("c16", {}).get(key), stock["c16"].get(key)
        if mine and theirs:  # the replica's CPU per answer at c=16 over stock's replica's
            out[f"handle_c16_{arm}_replica_cpu_vs_stock"] = round(mine / theirs, 3)
    return out
