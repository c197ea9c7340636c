"""Batching across requests: do concurrent single-row requests share one forward pass, and at what
cost at low load? In-process, without Ray (the ingress's shape: Pipeline over a ``LocalPoolClient``,
every chunk on the device thread, cache bypassed).

    python -m benchmarks.batching --json out.json [--model digits-small] [--quick]

Arms, the same model file, only its ``max_batch_size`` / ``batch_wait_ms`` differ:
``unbatched`` (max_batch_size 1: one forward per request, what a stock deployment without
``@serve.batch`` does), ``batched`` (up to 64 rows, no wait: the requests that queued while the
device was busy; the demo models' config) and ``batched_wait_2ms`` (up to 64 rows, the adaptive
wait of up to 2 ms, the demo models' earlier config). Closed loop at concurrency 1 (latency)
and 16 (throughput); rows per forward = answered requests / chunks run.

Targets (``meets_targets``): at c=16 ``batched`` throughput >= 1.2x ``unbatched`` with more than
one row per forward; at c=1 its p50 within 0.1 ms of ``unbatched``'s (no added latency at low
load).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from benchmarks._output import emit

ARMS: dict[str, dict[str, Any]] = {
    "unbatched": {"max_batch_size": 1, "batch_wait_ms": 0.0},
    "batched": {"max_batch_size": 64, "batch_wait_ms": 0.0},
    "batched_wait_2ms": {"max_batch_size": 64, "batch_wait_ms": 2.0}}


async def _closed(pipe, req, concurrency: int, seconds: float) -> tuple[list[float], float]:
    lat: list[float] = []
    stop = time.perf_counter() + seconds

    async def caller() -> None:
        while (t := time.perf_counter()) < stop:
            await pipe.infer(req())
            lat.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return lat, time.perf_counter() - t0


async def _arm(root: Path, model: str, over: dict[str, Any], seconds: float) -> dict[str, Any]:
    from fallbacks import BreakerRegistry
    from pool._private.worker import DeviceWorker
    from pool.device import DeviceSpec
    from pool.host import ModelHost
    from pool.repository import ModelRepository
    from router.catalog import ModelCatalog, config_of
    from router.pipeline import Pipeline
    from router.pool_client import LocalPoolClient
    from router.schemas import CacheControl, InferenceRequest

    cfg_path = root / "repo" / model / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg.update(over)
    cfg_path.write_text(yaml.safe_dump(cfg))
    host = ModelHost(ModelRepository(root / "repo", settle_s=0), DeviceWorker(
        DeviceSpec(kind="cpu", memory_budget_bytes=64 << 20, inline_ms=0.0)))
    await host.sync()

    async def fetch():
        return host.index()

    catalog = ModelCatalog(fetch)
    await catalog.refresh()
    pipe = Pipeline(catalog, {"cpu": LocalPoolClient(host)}, breakers=BreakerRegistry())
    spec = config_of(host.index()[model]).inputs[0]
    x = np.random.default_rng(0).standard_normal((1, *spec.shape)).astype(np.float32)
    bypass = CacheControl(skip_read=True, skip_write=True)

    def req() -> InferenceRequest:
        return InferenceRequest(model=model, inputs={spec.name: x}, cache=bypass)

    out: dict[str, Any] = {"max_batch_size": cfg["max_batch_size"],
                           "batch_wait_ms": cfg["batch_wait_ms"]}
    try:
        await _closed(pipe, req, 4, 0.5)  # warm-up: loads, measured costs
        for c in (1, 16):
            chunks = host.worker.chunks
            lat, dur = await _closed(pipe, req, c, seconds)
            ms = np.asarray(lat) * 1e3
            out[f"c{c}"] = {"n": int(ms.size), "throughput_rps": round(ms.size / dur, 1),
                            "p50_ms": round(float(np.percentile(ms, 50)), 3),
                            "p99_ms": round(float(np.percentile(ms, 99)), 3),
                            "rows_per_forward": round(ms.size / max(host.worker.chunks - chunks,
                                                                    1), 2)}
    finally:
        await host.worker.close()
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    from deploy.demo import build_demo_repository

    src = Path(args.demo_repo) if args.demo_repo else None
    arms: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ts-batching-") as tmp:
        if src is None:
            src = Path(tmp) / "build"
            build_demo_repository(src, only=[args.model])
        for name, over in ARMS.items():
            root = Path(tmp) / name
            shutil.copytree(src / args.model, root / "repo" / args.model)
            arms[name] = asyncio.run(_arm(root, args.model, over, args.seconds))
    b, u = arms["batched"], arms["unbatched"]
    ratio = round(b["c16"]["throughput_rps"] / u["c16"]["throughput_rps"], 3)
    added = round(b["c1"]["p50_ms"] - u["c1"]["p50_ms"], 3)
    targets = {
        "c16_throughput_batched_vs_unbatched": {"value": ratio, "target": ">= 1.2",
                                                "met": ratio >= 1.2},
        "c16_rows_per_forward": {"value": b["c16"]["rows_per_forward"], "target": "> 1",
                                 "met": b["c16"]["rows_per_forward"] > 1},
        "c1_p50_added_ms": {"value": added, "target": "<= 0.1", "met": added <= 0.1},
    }
    w = arms["batched_wait_2ms"]
    return {"benchmark": "batching", "model": args.model, "seconds": args.seconds, "arms": arms,
            "ratios": {"c16_batched_vs_unbatched": ratio,
                       "c16_wait_2ms_vs_unbatched": round(w["c16"]["throughput_rps"]
                                                          / u["c16"]["throughput_rps"], 3),
                       "c1_p50_batched_minus_unbatched_ms": added,
                       "c1_p50_wait_2ms_minus_unbatched_ms": round(
                           w["c1"]["p50_ms"] - u["c1"]["p50_ms"], 3)},
            "targets": targets, "meets_targets": all(t["met"] for t in targets.values())}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json")
    p.add_argument("--model", default="digits-small")
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per closed-loop run")
    p.add_argument("--demo-repo", help="an existing demo repository holding --model")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds = 1.0
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
