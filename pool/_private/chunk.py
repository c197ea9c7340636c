"""The chunk runner: one forward pass of a chunk of rows on the device (the execute step).

Runs on the device thread (one per device, so chunks never overlap on the device) or, for small
CPU chunks, inline on the event loop (see ``DeviceSpec.inline_ms``); on CUDA on a stream whose
priority follows the request class. A pending swap-in's copy runs in the same device call; CUDA
out of memory evicts every idle model and retries once. Also the load-time warm-up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from policies.inline import INLINE_AFTER_RUNS, INLINE_STALL, is_stall
from policies.priority import Priority
from pool._private.bounded import why_unbounded
from pool._private.queue import ModelQueue, Pending
from pool._private.residency import Residency, SwapIn
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory
from pool.types import Rows

__all__ = ["INLINE_AFTER_RUNS", "INLINE_STALL", "ChunkOutput", "ChunkRunner", "device_thread",
           "join_rows", "name_outputs", "warm_up", "warmed_loader", "with_threads"]

T = TypeVar("T")
log = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class ChunkOutput:
    """What one chunk produced: named CPU outputs for its ``rows`` and where the time went
    (``device_s`` measured in the device call, so thread hops do not count as compute)."""

    outputs: dict[str, torch.Tensor]
    rows: int
    device_s: float
    copy_s: float
    compute_s: float
    swap_s: float
    inline: bool
    inline_cpu_s: float | None = None  # the loop thread's CPU time in an inline chunk


def device_thread(device: DeviceSpec) -> ThreadPoolExecutor:
    """The one thread that touches the device. torch's intra-op thread count is per OS thread,
    so it is set there (a fresh thread would default to all cores and oversubscribe them)."""
    threads = device.threads or torch.get_num_threads()
    return ThreadPoolExecutor(1, thread_name_prefix=f"timeshare-{device.label}",
                              initializer=torch.set_num_threads, initargs=(threads,))


class ChunkRunner:
    """Executes chunks for one ``DeviceWorker`` over its residency tiers and device thread."""

    def __init__(self, device: DeviceSpec, tiers: Residency, executor: ThreadPoolExecutor) -> None:
        self.device = device
        self.tiers = tiers
        self._executor = executor
        self.threads = device.threads or torch.get_num_threads()
        # Inline chunks are a CPU-only shortcut: CUDA work stays on the device thread's streams.
        self.inline_s = device.inline_ms / 1e3 if device.kind == "cpu" else 0.0
        self._streams = tiers.compute_streams  # the streams its swap-in copies order (residency)

    def in_device_thread(self, fn, *args):
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def runs_inline(self, entry: ModelQueue, rows: int, swap: SwapIn | None,
                    module: nn.Module) -> bool:
        """Run this chunk on the loop thread? (see DeviceSpec.inline_ms)"""
        if (self._streams is not None or not self.inline_s or entry.inline_refused is not None
                or entry.thread_runs < INLINE_AFTER_RUNS):
            return False
        if self.device.inline_bounded_only and not entry.graph_read:
            entry.graph_read = True
            reason = why_unbounded(module)
            if reason is not None:
                entry.inline_refused = f"not proven bounded by its input shapes: {reason}"
                log.info("%s on %s: chunks stay on the device thread (%s)",
                         entry.config.name, self.device.label, entry.inline_refused)
                return False
        estimate = rows * entry.ewma_row_s
        if swap is not None:
            estimate += self.tiers.copy_cost_s(swap)
        return estimate <= self.inline_s

    async def run(self, name: str, entry: ModelQueue, parts: list[tuple[Pending, int, int]],
                  priority: Priority, swap: SwapIn | None, swap_s: float) -> ChunkOutput:
        """Run ``parts`` (request, first row, rows) of ``name`` as one forward pass."""
        module = self.tiers.module(name)
        dev = self.device.torch_device
        rows = sum(n for _, _, n in parts)
        args = [_rows_of(parts, t.name) for t in entry.config.inputs]
        stream = self._streams[priority] if self._streams else None
        copy = partial(self.tiers.copy, swap) if swap is not None else None
        inline = self.runs_inline(entry, rows, swap, module)
        inline_cpu_s = None
        with self.tiers.memory.running(name):
            t0 = time.perf_counter()
            try:
                if inline:
                    cpu0 = time.thread_time()
                    raw, device_s, copy_s = self._inline(_forward, module, args, dev, None, copy)
                    inline_cpu_s = time.thread_time() - cpu0
                else:
                    raw, device_s, copy_s = await self.in_device_thread(
                        _forward, module, args, dev, stream, copy)
            except torch.cuda.OutOfMemoryError:
                # Only the forward pass allocates (the copy's region was reserved beforehand),
                # so the weights are in place: record the swap, then evict and retry once.
                if swap is not None:
                    swap_s += self.tiers.swapped(swap, 0.0)
                    swap = None
                raw, device_s = await self._retry_after_oom(name, module, args, dev, stream)
                copy_s = 0.0
            except BaseException:
                if swap is not None:
                    self.tiers.abort(swap)  # the weights may be half-copied: never run them
                raise
            if swap is not None:
                swap_s += self.tiers.swapped(swap, copy_s)
            compute_s = time.perf_counter() - t0 - copy_s
        self.tiers.memory.touch(name)
        return ChunkOutput(name_outputs(entry.config, raw), rows, device_s, copy_s, compute_s,
                           swap_s, inline, inline_cpu_s)

    def stall(self, out: ChunkOutput) -> str | None:
        """Why ``out`` disqualifies its model from inline for good (None: it does not; the rule
        is ``policies.inline.is_stall``)."""
        took_s = out.device_s + out.copy_s
        if not is_stall(took_s, out.inline_cpu_s, self.inline_s,
                        bounded_only=self.device.inline_bounded_only):
            return None
        return f"a chunk took {took_s * 1e3:.1f} ms, over {INLINE_STALL:g}x inline_ms"

    def _inline(self, fn, *args):
        return with_threads(self.threads, fn, *args)

    async def _retry_after_oom(self, name, module, args, dev, stream) -> tuple[object, float]:
        """CUDA out of memory: evict every idle model and run the chunk once more."""
        self.tiers.evict_idle(keep=name)
        torch.cuda.empty_cache()
        try:
            raw, device_s, _ = await self.in_device_thread(_forward, module, args, dev, stream)
        except torch.cuda.OutOfMemoryError as e:
            raise DeviceOutOfMemory(f"{name}: CUDA out of memory after evicting") from e
        return raw, device_s


def _rows_of(parts: list[tuple[Pending, int, int]], name: str) -> torch.Tensor:
    """One input's rows for the chunk, in order, as one CPU tensor (numpy rows are joined in
    numpy and converted once: a tensor slice costs ten times a numpy one)."""
    rows = join_rows([p.inputs[name] if s == 0 and n == p.rows else p.inputs[name][s: s + n]
                      for p, s, n in parts])
    return torch.from_numpy(rows) if isinstance(rows, np.ndarray) else rows


def join_rows(rows: list[Rows]) -> Rows:
    """``rows`` in order as one block: numpy when every part is numpy, else a tensor."""
    arrays = [r for r in rows if isinstance(r, np.ndarray)]
    if len(arrays) == len(rows):
        return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
    tensors = [r if isinstance(r, torch.Tensor) else torch.from_numpy(r) for r in rows]
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _forward(module: nn.Module, args: list[torch.Tensor], dev: str, stream,
             copy: Callable[[], float] | None = None) -> tuple[object, float, float]:
    """Run one chunk, after ``copy()`` (a pending swap-in's copy) when given; returns the CPU
    outputs, the seconds the forward pass took in this thread, and the seconds of the copy."""
    copy_s = copy() if copy is not None else 0.0
    t0 = time.perf_counter()
    with torch.inference_mode():
        if stream is None:
            out = _to_cpu(module(*[a.to(dev) for a in args]))
        else:
            with torch.cuda.stream(stream):
                out = module(*[a.to(dev, non_blocking=True) for a in args])
                out = _to_cpu(out)
            stream.synchronize()
    return out, time.perf_counter() - t0, copy_s


def _to_cpu(raw):
    if isinstance(raw, torch.Tensor):
        return raw.cpu()
    if isinstance(raw, dict):
        return {k: v.cpu() for k, v in raw.items()}
    return tuple(v.cpu() for v in raw)


# TorchScript's profiling executor profiles a module's first passes and optimises after them
# (a 13.7 MB transformer encoder: ~250 ms, then ~200 ms, then 4 ms). The host tier keeps the
# module object, so paying them once at load keeps them off every request, swaps included.
_WARM_UP_PASSES = 2


def warm_up(module: nn.Module, config: ModelConfig) -> None:
    """Run the model's first passes on zeros of its declared shapes, at each of the config's
    warm-up batch sizes (validates it, and compiles a ``compile:`` model for those sizes)."""
    with torch.inference_mode():
        for rows in config.warmup_sizes:
            args = [
                torch.zeros((rows, *[d if d > 0 else 1 for d in spec.shape]),
                            dtype=getattr(torch, spec.numpy_dtype))
                for spec in config.inputs
            ]
            for _ in range(_WARM_UP_PASSES):
                name_outputs(config, module(*args))


def with_threads(threads: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on this thread with ``threads`` torch threads (a per-OS-thread setting in
    torch), restoring the thread's own count afterwards."""
    prev = torch.get_num_threads()
    if prev != threads:
        torch.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        if prev != threads:
            torch.set_num_threads(prev)


def warmed_loader(loader: Callable[[], nn.Module], config: ModelConfig, *, threads: int
                  ) -> Callable[[], nn.Module]:
    """``loader`` followed by the warm-up, for reloads from disk (run in the load's own thread,
    with the device's torch thread count): a fresh TorchScript module optimises its graph on its
    first passes (100 ms and more under load), which would otherwise run in its first chunk and
    hold the device thread, and every model queued behind it, for that long."""

    def load() -> nn.Module:
        module = loader().eval()
        with_threads(threads, warm_up, module, config)  # the load's thread is a pool thread
        return module

    return load


def name_outputs(config: ModelConfig, raw) -> dict[str, torch.Tensor]:
    """The model's raw outputs named by the config's ``outputs``."""
    names = [t.name for t in config.outputs]
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if isinstance(raw, dict):
        return {n: raw[n] for n in names}
    if len(raw) != len(names):
        raise ValueError(f"model returned {len(raw)} outputs, config declares {names}")
    return dict(zip(names, raw, strict=True))
