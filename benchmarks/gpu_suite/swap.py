"""Swap-in bandwidth vs a raw pinned host->device copy of the same bytes and vs
``module.to(device)`` from pageable memory, for 1, 4, 10, 32 and 100 MiB and 1 GiB models
(CPU: small sizes), and the fixed cost of a swap.

Swap-in is timed end to end through ``Residency.ensure`` (eviction, reservation, the copy on
the copy stream and its event): two models of the size share a budget that holds one, so every
call swaps one in. Each figure is the median over rounds. ``fixed_cost_us``: the intercept of
a least-squares line of the median swap time against bytes over all sizes (what a swap costs
beyond moving its bytes), beside the raw copy's own intercept.
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
FIT_MAX_BYTES = 32 << 20
# label -> (bytes, layer width, rounds)
SIZES = {
    "cuda": {"1MB": (1 << 20, 256, 40), "4MB": (4 << 20, 512, 40),
             "10MB": (10 << 20, 512, 20), "32MB": (32 << 20, 1024, 20),
             "100MB": (100 << 20, 1024, 10), "1GB": (1 << 30, 4096, 5)},
    "cpu": {"1MB": (1 << 20, 256, 9), "4MB": (4 << 20, 512, 9), "10MB": (10 << 20, 512, 5)},
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


async def swap_in_s(env: Env, nbytes: int, width: int, rounds: int) -> tuple[float, int]:
    """Median seconds of one swap-in of an ``nbytes`` model, and its bytes."""
    tiers, _, one = await two_model_tiers(env, nbytes, width)
    for key in ("0", "1"):  # warm-up: first touch of the regions
        await tiers.ensure(key, I, {})
    times = []
    for r in range(rounds):
        t0 = time.perf_counter()
        await tiers.ensure(str(r % 2), I, {})
        times.append(time.perf_counter() - t0)
    return statistics.median(times), one


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
    fit: list[tuple[int, float, float]] = []  # (bytes, swap s, raw copy s)
    for label, (nbytes, width, rounds) in sizes.items():
        log(f"swap {label}")
        swap_s, n = await swap_in_s(env, nbytes, width, rounds)
        swap = n / swap_s / 1e9
        env.free_cache()
        raw = await asyncio.to_thread(raw_copy_gbps, n, env.kind, rounds)
        env.free_cache()
        fit.append((n, swap_s, n / raw / 1e9))
        row: dict[str, object] = {"model_bytes": n, "rounds": rounds,
               "swap_in_us": round(swap_s * 1e6, 1), "swap_in_gbps": round(swap, 3),
               "raw_copy_gbps": round(raw, 3), "swap_over_raw": round(swap / raw, 3)}
        if env.cuda:
            to_dev = to_device_gbps(env, nbytes, width, rounds)
            row.update(module_to_device_pageable_gbps=round(to_dev, 3),
                       swap_over_module_to=round(swap / to_dev, 3))
            env.free_cache()
        else:
            row["module_to_device_pageable_gbps"] = "skipped: no CUDA (.to('cpu') is no copy)"
        out["sizes"][label] = row
    # Fitted over the sizes up to 32 MiB, where a fixed cost is visible at all (a 1 GiB copy's
    # run-to-run noise alone is larger than it).
    small = [f for f in fit if f[0] <= FIT_MAX_BYTES]
    out["fixed_cost_us"] = round(_intercept([(b, s) for b, s, _ in small]) * 1e6, 1)
    out["raw_copy_fixed_cost_us"] = round(_intercept([(b, r) for b, _, r in small]) * 1e6, 1)
    out["fixed_cost_fitted_over"] = [b for b, _, _ in small]
    return out


def _intercept(points: list[tuple[int, float]]) -> float:
    """Least-squares intercept of seconds against bytes (0 with fewer than two sizes)."""
    if len(points) < 2:
        return 0.0
    xs = [float(b) for b, _ in points]
    ys = [s for _, s in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return my - slope * mx


def _given(m: nn.Module) -> nn.Module:
    """The module itself (the host tier packs its weights; the register factory deep-copies)."""
    return m
