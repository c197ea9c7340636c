"""Priority preemption: realtime latency while background work saturates the device.

    python -m benchmarks.priority --json out.json [--seconds 6]

In-process DeviceWorker on CPU with a memory budget (no Ray). Realtime requests (1 row) arrive
open-loop (Poisson, ``--rt-rate``/s); background requests (``--bg-rows`` rows each) are sent by
``--bg-clients`` closed-loop clients, so the device is always busy. Phases, same models:

- realtime alone, background alone (the reference figures; same scheduler and chunk policy as
  the mixed phase: chunks of ``--chunk-ms`` of estimated work, at most ``--chunk`` rows);
- both together under the ``priority`` scheduler (chunked background, re-decided per chunk);
- both together under the ``fifo`` scheduler (the baseline: whole batches, arrival order);
- background alone under ``fifo`` (whole batches): reference for what chunking costs.

The phases run interleaved for ``--rounds`` rounds and samples are pooled, so noise on a shared
machine falls on all of them alike.

Targets: realtime p99 together <= 1.5x alone, background throughput >= 70% of alone, realtime
p99 >= 3x better than FIFO. Prints one JSON object and writes it to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import numpy as np
import torch
from torch import nn

from benchmarks._output import emit
from policies.priority import Priority
from policies.scheduling import get_scheduling_policy
from pool import ModelKey
from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.device import DeviceSpec

RT, BG = ModelKey("realtime-model", "1"), ModelKey("background-model", "1")
WIDTH = 256


def _config(name: str, max_batch: int, wait_ms: float) -> ModelConfig:
    return ModelConfig(name=name, inputs=[{"name": "x", "dtype": "FP32", "shape": [WIDTH]}],
                       outputs=[{"name": "y", "dtype": "FP32", "shape": [10]}],
                       max_batch_size=max_batch, batch_wait_ms=wait_ms)


def _mlp(hidden: int, depth: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(WIDTH, hidden), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(hidden, 10))


def _policy(args, scheduler: str):
    if scheduler == "priority" and args.device == "cuda" and args.chunk_ms is None:
        return "priority"  # the worker's CUDA default: whole batches, stream priorities preempt
    if scheduler == "priority":
        return get_scheduling_policy("priority", chunk_ms=args.chunk_ms or 2.0)
    return get_scheduling_policy(scheduler)


async def _phase(args, scheduler: str, rt: bool, bg: bool) -> dict:
    """One phase: a fresh worker, warm-up, then load for ``args.seconds``; raw samples back."""
    worker = DeviceWorker(
        DeviceSpec(kind=args.device, memory_budget_bytes=256 << 20, chunk_size=args.chunk),
        scheduler=_policy(args, scheduler),
    )
    await worker.add_model(RT, _config("realtime-model", 8, 0.0), lambda: _mlp(1024, 2, 1))
    await worker.add_model(BG, _config("background-model", args.bg_rows, 0.0),
                           lambda: _mlp(args.bg_hidden, args.bg_depth, 2))
    rt_x, bg_x = torch.randn(1, WIDTH), torch.randn(args.bg_rows, WIDTH)
    for _ in range(20):  # warm-up both models (and their cost-per-row estimates)
        await worker.infer(RT, {"x": rt_x}, priority=Priority.REALTIME)
        await worker.infer(BG, {"x": bg_x}, priority=Priority.BACKGROUND)
    stop = time.perf_counter() + args.seconds
    lat: list[float] = []
    bg_rows = 0

    async def one_rt() -> None:
        t0 = time.perf_counter()
        await worker.infer(RT, {"x": rt_x}, priority=Priority.REALTIME)
        lat.append(time.perf_counter() - t0)

    async def rt_load() -> None:
        rng, tasks = random.Random(len(lat) + 7), []
        next_at = time.perf_counter()
        while True:
            next_at += rng.expovariate(args.rt_rate)
            if next_at >= stop:
                break
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            tasks.append(asyncio.create_task(one_rt()))
        await asyncio.gather(*tasks)

    async def bg_client() -> None:
        nonlocal bg_rows
        while time.perf_counter() < stop:
            await worker.infer(BG, {"x": bg_x}, priority=Priority.BACKGROUND)
            if time.perf_counter() <= stop:
                bg_rows += args.bg_rows

    chunks0 = worker.chunks
    start = time.perf_counter()
    jobs = (([rt_load()] if rt else [])
            + ([bg_client() for _ in range(args.bg_clients)] if bg else []))
    await asyncio.gather(*jobs)
    elapsed = min(time.perf_counter(), stop) - start
    status = worker.status()
    await worker.close()
    return {"lat": lat, "bg_rows": bg_rows, "elapsed": elapsed,
            "chunks": status["chunks"] - chunks0, "preemptions": status["preemptions"]}


def _merge(scheduler: str, samples: list[dict], rt: bool, bg: bool) -> dict:
    """Pool one phase's samples over all rounds."""
    elapsed = sum(s["elapsed"] for s in samples)
    out: dict = {"scheduler": scheduler,
                 "preemptions": sum(s["preemptions"] for s in samples),
                 "chunks_per_s": round(sum(s["chunks"] for s in samples) / elapsed, 1)}
    if rt:
        a = np.array([x for s in samples for x in s["lat"]]) * 1e3
        out.update(rt_requests=len(a), rt_p50_ms=round(float(np.percentile(a, 50)), 3),
                   rt_p99_ms=round(float(np.percentile(a, 99)), 3))
    if bg:
        out["bg_rows_per_s"] = round(sum(s["bg_rows"] for s in samples) / elapsed, 1)
    return out


# name -> (scheduler, realtime load, background load)
PHASES = {
    "realtime_alone": ("priority", True, False),
    "background_alone": ("priority", False, True),
    "priority_mixed": ("priority", True, True),
    "fifo_mixed": ("fifo", True, True),
    # Reference only: background with whole batches (no chunks), what chunking costs it.
    "background_alone_unchunked": ("fifo", False, True),
}


async def run(args) -> dict:
    # Phases are interleaved round by round so that noise from other work on a shared machine
    # lands on every arm alike; samples are pooled over the rounds.
    samples: dict[str, list[dict]] = {name: [] for name in PHASES}
    for _ in range(args.rounds):
        for name, (scheduler, rt, bg) in PHASES.items():
            samples[name].append(await _phase(args, scheduler, rt, bg))
    res = {name: _merge(sch, samples[name], rt, bg) for name, (sch, rt, bg) in PHASES.items()}
    rt_alone, bg_alone, mixed, fifo = (res[k] for k in list(PHASES)[:4])
    ratio_alone = mixed["rt_p99_ms"] / rt_alone["rt_p99_ms"]
    kept = mixed["bg_rows_per_s"] / bg_alone["bg_rows_per_s"]
    vs_fifo = fifo["rt_p99_ms"] / mixed["rt_p99_ms"]
    unchunked = res["background_alone_unchunked"]["bg_rows_per_s"]
    return {
        "benchmark": "priority",
        "device": ("cpu (budget arena)" if args.device == "cpu"
                   else torch.cuda.get_device_name(0)),
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "seconds_per_phase_per_round": args.seconds,
        "rt_rate_per_s": args.rt_rate,
        "bg_clients": args.bg_clients,
        "bg_rows_per_request": args.bg_rows,
        "chunk_ms": args.chunk_ms,
        "chunk_size_max_rows": args.chunk,
        **res,
        "rt_p99_vs_alone": round(ratio_alone, 3),
        "bg_throughput_kept": round(kept, 3),
        "rt_p99_fifo_over_priority": round(vs_fifo, 3),
        "bg_alone_chunked_over_unchunked": round(bg_alone["bg_rows_per_s"] / unchunked, 3),
        "bg_mixed_over_unchunked_alone": round(mixed["bg_rows_per_s"] / unchunked, 3),
        "targets": {"rt_p99_vs_alone_max": 1.5, "bg_throughput_kept_min": 0.7,
                    "rt_p99_fifo_over_priority_min": 3.0},
        "meets_targets": ratio_alone <= 1.5 and kept >= 0.7 and vs_fifo >= 3.0,
    }


def parser() -> argparse.ArgumentParser:
    """The benchmark's options (the GPU suite builds its arguments from it too)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the JSON object to this file")
    ap.add_argument("--seconds", type=float, default=2.0,
                    help="duration of each phase in each round")
    ap.add_argument("--rounds", type=int, default=6, help="rounds of all phases, interleaved")
    ap.add_argument("--rt-rate", type=float, default=40.0, help="realtime requests per second")
    ap.add_argument("--bg-clients", type=int, default=8)
    ap.add_argument("--bg-rows", type=int, default=512)
    ap.add_argument("--chunk", type=int, default=1024,
                    help="DeviceSpec.chunk_size: the most rows in one chunk")
    ap.add_argument("--chunk-ms", type=float, default=None,
                    help="estimated work per chunk of non-realtime batches (the preemption "
                         "bound; default 2 on CPU, whole batches on CUDA)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--bg-hidden", type=int, default=256, help="background model's width")
    ap.add_argument("--bg-depth", type=int, default=1, help="background model's hidden layers")
    return ap


def main(argv: list[str] | None = None) -> dict:
    args = parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    out = asyncio.run(run(args))
    return emit(out, args.json)


if __name__ == "__main__":
    main()
