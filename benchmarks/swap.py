"""Swap-in bandwidth of the pool's tiers vs a raw copy of the same bytes on the same device.

    python -m benchmarks.swap --json out.json [--mb 256] [--rounds 10] [--device auto|cpu|cuda]

Two models of ``--mb`` MB each share a device whose budget holds one, so every swap-in evicts the
other (host tier keeps both: no disk reads). Swap-in time is measured end to end through
``Residency.ensure`` (eviction, region allocation, copy, re-binding the module). The baseline is a
plain ``dst.copy_(src)`` of the same number of bytes (host->device from pinned memory on CUDA).
Needs torch only (no Ray). Prints one JSON object and writes it to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from functools import partial

import torch
from torch import nn

from benchmarks._output import emit
from policies.priority import Priority
from pool._private.residency import Residency
from pool.device import DeviceSpec


def _model(mb: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    width = 1024
    layers = max(1, (mb << 20) // (width * width * 4))
    return nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])


def _sync(kind: str) -> None:
    if kind == "cuda":
        torch.cuda.synchronize()


def raw_copy_gbps(nbytes: int, kind: str, rounds: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "cuda"))
    src.fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda" if kind == "cuda" else "cpu")
    dst.copy_(src)  # first touch / warm-up
    times = []
    for _ in range(rounds):
        _sync(kind)
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=(kind == "cuda"))
        _sync(kind)
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


async def swap_in_gbps(mb: int, kind: str, rounds: int) -> tuple[float, int, dict]:
    probe = _model(mb, 0)
    nbytes = sum(p.numel() * p.element_size() for p in probe.parameters())
    budget = nbytes + nbytes // 2 + (1 << 20)  # one model fits, two do not
    spec = DeviceSpec(kind=kind, memory_budget_bytes=budget)
    tiers = Residency(spec)
    for i, key in enumerate(("a", "b")):
        packed, load_s = await tiers.load(partial(_model, mb, i))
        tiers.register(key, partial(_model, mb, i), Priority.INTERACTIVE, packed, load_s)
    await tiers.ensure("a", Priority.INTERACTIVE, {})  # warm-up (first touch of the arena)
    await tiers.ensure("b", Priority.INTERACTIVE, {})
    times = []
    for r in range(rounds):
        key = "a" if r % 2 == 0 else "b"
        times.append(await tiers.ensure(key, Priority.INTERACTIVE, {}))
    s = tiers.stats
    stats = {"swaps": s.swaps, "swap_bytes": s.swap_bytes, "swap_outs": s.swap_outs,
             "disk_loads": s.disk_loads}
    return tiers.nbytes("a") / statistics.median(times) / 1e9, tiers.nbytes("a"), stats


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the JSON object to this file")
    ap.add_argument("--mb", type=int, default=128, help="size of each model in MB")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    args = ap.parse_args(argv)
    kind = args.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    swap, nbytes, stats = asyncio.run(swap_in_gbps(args.mb, kind, args.rounds))
    raw = raw_copy_gbps(nbytes, kind, args.rounds)
    out = {
        "benchmark": "swap",
        "device": kind if kind == "cpu" else torch.cuda.get_device_name(0),
        "path": "host->device (pinned)" if kind == "cuda" else "host->arena (CPU stand-in)",
        "model_bytes": nbytes,
        "rounds": args.rounds,
        "swap_in_gbps": round(swap, 3),
        "raw_copy_gbps": round(raw, 3),
        "ratio": round(swap / raw, 3),
        "target_ratio": 0.8,
        "meets_target": swap / raw >= 0.8,
        "tiers": stats,
    }
    return emit(out, args.json)


if __name__ == "__main__":
    main()
