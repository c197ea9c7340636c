"""The memory checks: a forced out-of-memory evicts, retries, then hands the request back; and
nothing leaks across 1,000 swap cycles."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from functools import partial

import torch
from torch import nn

from benchmarks.gpu_suite._env import Env, check, config, linear_stack, model_bytes
from pool import ModelKey
from pool._private.device_memory import ArenaMemory
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory

__all__ = ["Hungry", "no_leak", "oom_evict_retry"]

WIDTH = 256


class Hungry(nn.Module):
    """A linear layer whose forward pass also needs ``need`` bytes of scratch on its device.

    On the CPU stand-in the scratch is accounted against ``arena_free()`` (the device budget
    the resident models leave free); more than that raises torch's CUDA out-of-memory error,
    as the caching allocator would on a GPU.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)
        self.need = 0
        self.arena_free: Callable[[], int] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.need:
            if x.device.type == "cpu":
                if self.arena_free is not None and self.need > self.arena_free():
                    raise torch.cuda.OutOfMemoryError("simulated: scratch exceeds the free budget")
            else:
                scratch = torch.empty(self.need, dtype=torch.uint8, device=x.device)
                scratch.fill_(1)
        return self.lin(x)


async def oom_evict_retry(env: Env) -> dict:
    filler = (256 << 20) if env.cuda else (1 << 20)
    n_fill = 4
    hungry = Hungry()
    hb = model_bytes(hungry)
    w = DeviceWorker(DeviceSpec(kind=env.kind, memory_budget_bytes=n_fill * filler + 2 * hb +
                                (64 << 20 if env.cuda else 1 << 16), inline_ms=0))
    H = ModelKey("hungry", "1")
    x = torch.randn(4, WIDTH)
    fraction_set = False
    try:
        for i in range(n_fill):
            m = linear_stack(filler, 1024 if env.cuda else WIDTH, 10 + i)
            await w.add_model(ModelKey(f"f{i}", "1"),
                              config(f"f{i}", 1024 if env.cuda else WIDTH),
                              partial(copy.deepcopy, m))
        await w.add_model(H, config("hungry", WIDTH), lambda: hungry)
        resident0 = len(w.status()["resident"])
        evictions0 = w.tiers.memory.evictions
        hungry.need = 2 * filler  # fits only once the idle fillers are gone
        if env.cuda:
            env.free_cache()
            total = torch.cuda.get_device_properties(0).total_memory
            cap = torch.cuda.memory_reserved(0) + filler  # headroom: one filler, need two
            torch.cuda.set_per_process_memory_fraction(cap / total, 0)
            fraction_set = True
        else:
            hungry.arena_free = lambda: w.tiers.memory.free_bytes
        r = await w.infer(H, {"x": x})
        evicted = w.tiers.memory.evictions - evictions0
        resident_after = w.status()["resident"]
        hungry.need = 1 << 40  # never fits: handed back
        try:
            await w.infer(H, {"x": x})
            handed_back = False
        except DeviceOutOfMemory:
            handed_back = True
        hungry.need = 0
        after = await w.infer(H, {"x": x})  # the worker still serves
    finally:
        if fraction_set:
            torch.cuda.set_per_process_memory_fraction(1.0, 0)
        await w.close()
    retried = r.outputs["y"].shape == (4, WIDTH) and evicted >= n_fill
    ok = retried and handed_back and after.outputs["y"].shape == (4, WIDTH)
    how = "real CUDA OOM (per-process memory fraction)" if env.cuda else (
        "simulated OOM on the CPU stand-in")
    return check(ok, f"{how}: evicted {evicted} idle models and the retry ran; an OOM that "
                 "persists after evicting is raised to the caller as DeviceOutOfMemory" if ok else
                 f"{how}: retried={retried} (evicted {evicted}), handed_back={handed_back}",
                 resident_before=resident0, resident_after=resident_after, evicted=evicted)


async def no_leak(env: Env) -> dict:
    """1,000 swap-ins with batches in flight: three 1 MiB models on a budget for two, requests
    sent in concurrent pairs of two models (on CUDA both batches are on the device together,
    while the next pair's swap-in waits for room)."""
    cycles = 1800  # pairs; a multiple of three ends in the phase the baseline was taken in
    # about two swaps in three pairs (the eviction policy sometimes keeps the next pair's pair)
    width = 512
    models = {s: linear_stack(1 << 20, width, s) for s in (0, 1, 2)}
    one = model_bytes(models[0])
    w = DeviceWorker(DeviceSpec(kind=env.kind, memory_budget_bytes=2 * one + one // 2,
                                inline_ms=0))
    keys = [ModelKey(f"m{s}", "1") for s in (0, 1, 2)]
    x = torch.randn(2, width)

    async def pair(i: int) -> None:
        await asyncio.gather(w.infer(keys[i % 3], {"x": x}), w.infer(keys[(i + 1) % 3], {"x": x}))

    try:
        for s, m in models.items():
            await w.add_model(keys[s], config(f"m{s}", width), partial(copy.deepcopy, m))
        for i in range(3):
            await pair(i)
        base = _usage(env, w)
        swaps0 = w.status()["swaps"]["count"]
        for i in range(3, 3 + cycles):
            await pair(i)
        after = _usage(env, w)
        swaps = w.status()["swaps"]["count"] - swaps0
    finally:
        await w.close()
    ok = after == base and swaps >= 1000
    what = "torch.cuda.memory_allocated" if env.cuda else "arena holes and resident bytes"
    return check(ok, f"{what} back to baseline after {swaps} swap-ins with batches in flight"
                 if ok else f"{what} {base} -> {after} after {swaps} swap-ins", baseline=base,
                 after=after, swaps=swaps)


def _usage(env: Env, w: DeviceWorker) -> list[int]:
    if env.cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()  # also frees blocks still waiting on copy-stream events
        return [torch.cuda.memory_allocated(0), w.tiers.memory.used_bytes]
    arena = w.tiers.memory.memory
    assert isinstance(arena, ArenaMemory)
    return [arena.largest_hole(), w.tiers.memory.used_bytes]
