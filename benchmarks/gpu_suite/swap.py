"""Swap-in bandwidth vs a raw pinned host->device copy of the same bytes and vs
``module.to(device)`` from pageable memory, for 10 MB, 100 MB and 1 GB models (CPU: small sizes).

Swap-in is timed end to end through ``Residency.ensure`` (eviction, reservation, the copy on
the copy stream and its event): two models of the size share a budget that holds one, so every
call swaps one in. Each figure is the median over rounds.
"""

from __future__ import annotations

import asyncio
import copy
import statistics
import time
from functools import partial

from torch import nn

from benchmarks.gpu_suite._env import Env, linear_stack, log, model_bytes
from benchmarks.swap import raw_copy_gbps
from policies.priority import Priority
from pool._private.residency import Residency
from pool.device import DeviceSpec

__all__ = ["SIZES", "run_swap"]

I = Priority.INTERACTIVE
# label -> (bytes, layer width, rounds)
SIZES = {
    "cuda": {"10MB": (10 << 20, 512, 20), "100MB": (100 << 20, 1024, 10),
             "1GB": (1 << 30, 4096, 5)},
    "cpu": {"1MB": (1 << 20, 256, 5), "10MB": (10 << 20, 512, 5)},
    "cpu-quick": {"1MB": (1 << 20, 256, 3), "4MB": (4 << 20, 512, 3)},
}


async def two_model_tiers(env: Env, nbytes: int, width: int
                          ) -> tuple[Residency, list[nn.Sequential], int]:
    """Residency of two ``nbytes`` models "0" and "1" in the host tier, a device budget that
    holds one of them (so each swap-in evicts the other); the models; one model's bytes."""
    models = [linear_stack(nbytes, width, s) for s in (0, 1)]
    one = model_bytes(models[0])
    tiers = Residency(DeviceSpec(kind=env.kind, memory_budget_bytes=one + one // 2))
    for i, m in enumerate(models):
        packed, load_s = await tiers.load(partial(_given, m))
        tiers.register(str(i), partial(copy.deepcopy, m), I, packed, load_s)
    return tiers, models, one


async def swap_in_gbps(env: Env, nbytes: int, width: int, rounds: int) -> tuple[float, int]:
    tiers, _, one = await two_model_tiers(env, nbytes, width)
    for key in ("0", "1"):  # warm-up: first touch of the regions
        await tiers.ensure(key, I, {})
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        await tiers.ensure(str(r % 2), I, {})
        times.append(time.perf_counter() - t0)
    return one / statistics.median(times) / 1e9, one


def to_device_gbps(env: Env, nbytes: int, width: int, rounds: int) -> float:
    """``module.to(device)`` from pageable host memory (what a plain host-RAM cache does)."""
    m = linear_stack(nbytes, width, 2)
    n = model_bytes(m)
    m.to(env.device)
    m.to("cpu")
    times = []
    for _ in range(rounds):
        env.sync()
        t0 = time.perf_counter()
        m.to(env.device)
        env.sync()
        times.append(time.perf_counter() - t0)
        m.to("cpu")
    return n / statistics.median(times) / 1e9


async def run_swap(env: Env) -> dict:
    sizes = SIZES["cuda" if env.cuda else ("cpu-quick" if env.quick else "cpu")]
    out: dict = {"path": "pinned host -> device on the copy stream" if env.cuda else
                 "host -> arena (CPU stand-in; sizes scaled down)", "sizes": {}}
    for label, (nbytes, width, rounds) in sizes.items():
        log(f"swap {label}")
        swap, n = await swap_in_gbps(env, nbytes, width, rounds)
        env.free_cache()
        raw = await asyncio.to_thread(raw_copy_gbps, n, env.kind, rounds)
        env.free_cache()
        row: dict[str, object] = {"model_bytes": n, "rounds": rounds,
               "swap_in_gbps": round(swap, 3),
               "raw_copy_gbps": round(raw, 3), "swap_over_raw": round(swap / raw, 3)}
        if env.cuda:
            to_dev = to_device_gbps(env, nbytes, width, rounds)
            row.update(module_to_device_pageable_gbps=round(to_dev, 3),
                       swap_over_module_to=round(swap / to_dev, 3))
            env.free_cache()
        else:
            row["module_to_device_pageable_gbps"] = "skipped: no CUDA (.to('cpu') is no copy)"
        out["sizes"][label] = row
    return out


def _given(m: nn.Module) -> nn.Module:
    """The module itself (the host tier packs its weights; the register factory deep-copies)."""
    return m
