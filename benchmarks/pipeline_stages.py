"""Where a cache-bypassed request's time goes inside the ingress, without Ray: the Pipeline over a
``LocalPoolClient`` (every chunk on the device thread: ``inline_ms`` 0), with the ingress's
recorders (telemetry, counters, call log). Evidence for docs/PERFORMANCE.md, not a benchmark.

    python -m benchmarks.pipeline_stages --json out.json [--n 3000] [--model digits-small]

Prints p50/mean of ``Pipeline.infer``, the median response timings, and cProfile self time per
request grouped by stage (profiling roughly doubles every figure; read them as shares). Then
``hop_c16``: 16 concurrent callers for ``--hop-s`` seconds while a CPU-bound co-tenant holds the
loop 20 % of the time (as HTTP and Ray work do in the ingress), once with every chunk on the
device thread and once inline (``inline_ms`` 3): the cost of the hop. (The ingress's own pool
runs a bounded graph's chunks of at most 1 ms inline since the eleventh session of 2026-11-24.)
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._output import emit

GROUPS = [
    ("router/pipeline.py", "pipeline"), ("router/validation.py", "validation"),
    ("router/cache", "cache"), ("fallbacks/chain.py", "chain runner"),
    ("fallbacks/breaker.py", "breakers"), ("fallbacks/", "fallbacks other"),
    ("router/pool_client.py", "pool client"), ("pool/host.py", "pool host"),
    ("pool/_private/worker.py", "worker loop"), ("pool/_private/queue.py", "worker queue"),
    ("policies/", "policies"), ("pool/_private/chunk.py", "chunk runner"),
    ("router/_private/recorders.py", "recorders"), ("alerting/telemetry", "telemetry"),
    ("opentelemetry", "telemetry"), ("router/calllog.py", "call log"),
    ("pydantic", "pydantic"), ("router/schemas", "pydantic"), ("torch", "torch"),
    ("numpy", "numpy"), ("asyncio", "asyncio"), ("concurrent/futures", "device-thread hop"),
    ("threading", "device-thread hop"),
]


async def _hop_c16(pipe, req, seconds: float) -> float:
    async def cotenant() -> None:
        while True:
            t = time.perf_counter()
            while time.perf_counter() - t < 0.0002:
                pass
            await asyncio.sleep(0.001)

    busy = asyncio.get_running_loop().create_task(cotenant())
    n, stop = 0, time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal n
        while time.perf_counter() < stop:
            await pipe.infer(req())
            n += 1

    await asyncio.gather(*(caller() for _ in range(16)))
    busy.cancel()
    return round(n / seconds, 1)


async def _run(args: argparse.Namespace, root: Path, inline_ms: float = 0.0,
               hop_only: bool = False) -> dict[str, Any]:
    from alerting.telemetry import Telemetry
    from fallbacks import BreakerRegistry
    from pool._private.worker import DeviceWorker
    from pool.device import DeviceSpec
    from pool.host import ModelHost
    from pool.repository import ModelRepository
    from router._private.recorders import CallLogRecorder, CounterRecorder, TelemetryRecorder
    from router.cache import CacheSettings, ResultCache
    from router.calllog import build_call_log
    from router.catalog import ModelCatalog, config_of
    from router.pipeline import Pipeline
    from router.pool_client import LocalPoolClient
    from router.schemas import CacheControl, InferenceRequest

    host = ModelHost(ModelRepository(root / "repo", settle_s=0), DeviceWorker(
        DeviceSpec(kind="cpu", memory_budget_bytes=64 << 20, inline_ms=inline_ms)))
    await host.sync()

    async def fetch():
        return host.index()

    catalog = ModelCatalog(fetch)
    await catalog.refresh()
    calls = build_call_log(path=str(root / "calls.jsonl"))
    pipe = Pipeline(catalog, {"cpu": LocalPoolClient(host)}, cache=ResultCache(CacheSettings()),
                    breakers=BreakerRegistry(),
                    recorders=(TelemetryRecorder(Telemetry(prometheus=False)), CounterRecorder(),
                               CallLogRecorder(calls)))
    spec = config_of(host.index()[args.model]).inputs[0]
    x = np.random.default_rng(0).standard_normal((1, *spec.shape)).astype(np.float32)
    bypass = CacheControl(skip_read=True, skip_write=True)

    def req() -> InferenceRequest:
        return InferenceRequest(model=args.model, inputs={spec.name: x}, cache=bypass)

    for _ in range(300):
        await pipe.infer(req())
    if hop_only:
        rps = await _hop_c16(pipe, req, args.hop_s)
        await calls.close()
        await host.worker.close()
        return {"rps": rps, "chunks": host.worker.chunks,
                "inline_chunks": host.worker.inline_chunks}
    result = await _measure(pipe, req, args.n)
    await calls.close()
    await host.worker.close()
    return {"benchmark": "pipeline_stages", "model": args.model, "n": args.n, **result}


async def _measure(pipe, req, n: int) -> dict[str, Any]:
    lat, tm = [], []
    for _ in range(n):
        t = time.perf_counter()
        r = await pipe.infer(req())
        lat.append(time.perf_counter() - t)
        tm.append((r.timings.queue_ms, r.timings.compute_ms, r.timings.total_ms))
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        await pipe.infer(req())
    prof.disable()
    by: collections.Counter[str] = collections.Counter()
    for (fn, _, name), (_, _, tt, _, _) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        group = next((g for k, g in GROUPS if k in fn), "other")
        by[group if fn != "~" else f"builtin {name[:40]}"] += tt
    med = np.median(np.asarray(tm), axis=0)
    return {"p50_us": round(float(np.percentile(lat, 50)) * 1e6),
            "mean_us": round(float(np.mean(lat)) * 1e6),
            "median_timings_ms": {"queue": round(float(med[0]), 3),
                                  "compute": round(float(med[1]), 3),
                                  "pipeline_total": round(float(med[2]), 3)},
            "profiled_self_us_per_request": {k: round(v / n * 1e6, 1)
                                             for k, v in by.most_common(25)}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json")
    p.add_argument("--model", default="digits-small")
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--hop-s", type=float, default=4.0)
    args = p.parse_args(argv)
    from deploy.demo import build_demo_repository

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_demo_repository(root / "repo", only=[args.model])
        result = asyncio.run(_run(args, root))
        result["hop_c16"] = {
            "device_thread": asyncio.run(_run(args, root, 0.0, hop_only=True)),
            "inline": asyncio.run(_run(args, root, 3.0, hop_only=True))}
        emit(result, args.json)


if __name__ == "__main__":
    main()
