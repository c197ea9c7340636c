"""Priority preemption: realtime latency while background work saturates the device.

    python -m benchmarks.priority --json out.json [--seconds 6]

In-process DeviceWorker on CPU with a memory budget (no Ray). Realtime requests (1 row) arrive
open-loop (Poisson, ``--rt-rate``/s); background requests (``--bg-rows`` rows each) are sent by
``--bg-clients`` closed-loop clients, so the device is always busy. Four phases, same models:

- realtime alone, background alone (the reference figures);
- both together under the ``priority`` scheduler (chunked background, re-decided per chunk);
- both together under the ``fifo`` scheduler (the baseline: whole batches, arrival order).

Targets: realtime p99 together <= 1.5x alone, background throughput >= 70% of alone, realtime
p99 >= 3x better than FIFO. Prints one JSON object and writes it to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import numpy as np
import torch
from torch import nn

from policies.priority import Priority
from pool._private.worker import DeviceWorker, ModelKey
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


async def _phase(args, scheduler: str, rt: bool, bg: bool) -> dict:
    worker = DeviceWorker(
        DeviceSpec(kind="cpu", memory_budget_bytes=256 << 20, chunk_size=args.chunk),
        scheduler=scheduler,
    )
    await worker.add_model(RT, _config("realtime-model", 8, 0.0), lambda: _mlp(1024, 2, 1))
    await worker.add_model(BG, _config("background-model", args.bg_rows, 0.0),
                           lambda: _mlp(256, 1, 2))
    rt_x, bg_x = torch.randn(1, WIDTH), torch.randn(args.bg_rows, WIDTH)
    for _ in range(20):  # warm-up both models
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
        rng, tasks = random.Random(7), []
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

    start = time.perf_counter()
    jobs = ([rt_load()] if rt else []) + ([bg_client() for _ in range(args.bg_clients)] if bg else [])
    await asyncio.gather(*jobs)
    elapsed = min(time.perf_counter(), stop) - start
    status = worker.status()
    await worker.close()
    out: dict = {"scheduler": scheduler, "preemptions": status["preemptions"],
                 "chunks": status["chunks"]}
    if rt:
        a = np.array(lat) * 1e3
        out.update(rt_requests=len(lat), rt_p50_ms=round(float(np.percentile(a, 50)), 3),
                   rt_p99_ms=round(float(np.percentile(a, 99)), 3))
    if bg:
        out["bg_rows_per_s"] = round(bg_rows / elapsed, 1)
    return out


async def run(args) -> dict:
    rt_alone = await _phase(args, "priority", rt=True, bg=False)
    bg_alone = await _phase(args, "priority", rt=False, bg=True)
    mixed = await _phase(args, "priority", rt=True, bg=True)
    fifo = await _phase(args, "fifo", rt=True, bg=True)
    ratio_alone = mixed["rt_p99_ms"] / rt_alone["rt_p99_ms"]
    kept = mixed["bg_rows_per_s"] / bg_alone["bg_rows_per_s"]
    vs_fifo = fifo["rt_p99_ms"] / mixed["rt_p99_ms"]
    return {
        "benchmark": "priority",
        "device": "cpu (budget arena)",
        "threads": torch.get_num_threads(),
        "seconds_per_phase": args.seconds,
        "rt_rate_per_s": args.rt_rate,
        "bg_clients": args.bg_clients,
        "bg_rows_per_request": args.bg_rows,
        "chunk_size": args.chunk,
        "realtime_alone": rt_alone,
        "background_alone": bg_alone,
        "priority_mixed": mixed,
        "fifo_mixed": fifo,
        "rt_p99_vs_alone": round(ratio_alone, 3),
        "bg_throughput_kept": round(kept, 3),
        "rt_p99_fifo_over_priority": round(vs_fifo, 3),
        "targets": {"rt_p99_vs_alone_max": 1.5, "bg_throughput_kept_min": 0.7,
                    "rt_p99_fifo_over_priority_min": 3.0},
        "meets_targets": ratio_alone <= 1.5 and kept >= 0.7 and vs_fifo >= 3.0,
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the JSON object to this file")
    ap.add_argument("--seconds", type=float, default=6.0, help="duration of each of 4 phases")
    ap.add_argument("--rt-rate", type=float, default=20.0, help="realtime requests per second")
    ap.add_argument("--bg-clients", type=int, default=8)
    ap.add_argument("--bg-rows", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=32, help="DeviceSpec.chunk_size (rows)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = asyncio.run(run(args))
    text = json.dumps(out)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return out


if __name__ == "__main__":
    main()
