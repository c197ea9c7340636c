"""A batch: the rows of one decision, what the device is given and what comes back.

The worker builds a :class:`Batch` from a scheduling decision and hands it to the device's
executor (``pool._private.executor``): on the CPU stand-in a thread runs :func:`run_on_cpu`
(the swap-in's copy, then the forward pass), or the loop thread does for a small batch (see
``DeviceSpec.inline_ms``); on CUDA the launcher enqueues it on its class's stream. Also the
load-time warm-up and the helpers that join and name rows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from policies.inline import (
    INLINE_AFTER_RUNS,
    INLINE_STALL,
    INLINE_THREADS,
    intra_op_threads,
    is_stall,
)
from policies.priority import Priority
from pool._private.bounded import why_unbounded
from pool._private.queue import ModelQueue, Pending
from pool._private.residency import Residency, SwapIn
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.types import Rows

__all__ = ["INLINE_AFTER_RUNS", "INLINE_STALL", "Batch", "BatchBuilder",
           "join_rows", "name_outputs", "run_on_cpu", "warm_up", "warmed_loader", "with_threads"]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(slots=True)
class Batch:
    """One batch of rows on its way to the device and back (vLLM's ``ModelRunnerOutput`` and
    the request batch in one): the worker fills the first part when it launches, the executor
    the second when the device is done, and the worker answers from it on its loop.

    ``parts`` are (request, first row, rows); ``args`` the model's inputs as CPU tensors, in
    the config's order; ``copy`` a pending swap-in's copy to run (or enqueue) before the
    forward pass. ``alone``: nothing else was in flight at launch, so launch-to-completion is
    this batch's own time (what the device's pace learns from).
    """

    name: str
    entry: ModelQueue
    parts: list[tuple[Pending, int, int]]
    priority: Priority
    swap: SwapIn | None
    module: nn.Module
    args: list[torch.Tensor]
    rows: int
    work_s: float
    launched_at: float
    alone: bool
    retried: bool = False
    inline: bool = False
    # -- filled in by the executor --------------------------------------------------------
    raw: Any = None  # the model's outputs, on the host (CPU tensors)
    device_s: float = 0.0  # the forward pass: in the device thread, or CUDA events
    device_cpu_s: float | None = None  # the forward pass's CPU on the thread that ran it (CPU)
    copy_s: float = 0.0  # the swap-in's copy (host seconds, or its events' on CUDA)
    swap_s: float = 0.0  # a swap already closed before an out-of-memory retry
    inline_cpu_s: float | None = None  # the loop thread's CPU time in an inline batch
    error: BaseException | None = None
    keep: list = field(default_factory=list)  # staging buffers held until completion (CUDA)
    loop: Any = None  # the event loop that launched it, where its completion is handled
    events: Any = None  # the batch's pooled (begin, done) events (CUDA)
    est_s: float = 0.0  # its estimated device time, as the executor counted it in flight
    threads: int = 0  # torch intra-op threads for its forward on CPU (0: the thread's own)


class BatchBuilder:
    """Builds a worker's batches over its residency tiers, and runs the CPU inline shortcut
    (small CPU batches on the event loop thread, see ``DeviceSpec.inline_ms``)."""

    def __init__(self, device: DeviceSpec, tiers: Residency) -> None:
        self.device = device
        self.tiers = tiers
        self.threads = device.threads or torch.get_num_threads()
        # Inline batches are a CPU-only shortcut: CUDA work stays on the executor's streams.
        self.inline_s = device.inline_ms / 1e3 if device.kind == "cpu" else 0.0

    def build(self, name: str, entry: ModelQueue, parts: list[tuple[Pending, int, int]],
              priority: Priority, swap: SwapIn | None, work_s: float, now: float,
              alone: bool) -> Batch:
        args = [_rows_of(parts, t.name) for t in entry.config.inputs]
        rows = parts[0][2] if len(parts) == 1 else sum(n for _, _, n in parts)
        b = Batch(name, entry, parts, priority, swap, self.tiers.module(name), args, rows,
                  work_s, now, alone)
        if self.device.kind == "cpu":
            # (unmeasured, the estimate is the cold default, 2 ms a row: the device's count)
            b.threads = intra_op_threads(self._forward_s(entry, rows, cpu=True),
                                         self.threads)
        return b

    def _forward_s(self, entry: ModelQueue, rows: int, *, cpu: bool) -> float:
        """``rows`` rows' forward pass by ``entry``'s measured cost: its CPU time where ``cpu``
        and it was measured (fixed part and per row, ``policies.estimates.ChunkCost``), else its
        wall time on the device thread per row."""
        if cpu and entry.cpu_cost is not None:
            return entry.cpu_cost.estimate_s(rows)
        return rows * entry.ewma_row_s

    def _inline_forward_s(self, entry: ModelQueue, rows: int) -> float:
        # A bounded graph cannot sleep: off a busy host its wall time is its CPU time. The
        # device thread's measured wall time is not: at c=16 behind the ingress it read 0.3 ms
        # a row, mostly waits for the GIL, for a forward of a few µs, which kept every chunk on
        # the thread (0-51 % inline from one run to the next, 2,405-3,314 answers/s:
        # docs/PERFORMANCE.md, "Inline stayed off"). A model that may sleep: its wall time.
        return self._forward_s(entry, rows, cpu=self.device.inline_bounded_only)

    def runs_inline(self, b: Batch) -> bool:
        """Run this batch on the loop thread? (see DeviceSpec.inline_ms)"""
        if not self.may_inline(b.entry, b.module):
            return False
        estimate = self._inline_forward_s(b.entry, b.rows)
        if b.swap is not None:
            estimate += self.tiers.copy_cost_s(b.swap)
        return estimate <= self.inline_s

    def fits_inline(self, entry: ModelQueue, rows: int) -> bool:
        """Would ``rows`` rows of ``entry``'s resident model run inline on an idle device?"""
        return (self.may_inline(entry, self.tiers.module(entry.name))
                and self._inline_forward_s(entry, rows) <= self.inline_s)

    def may_inline(self, entry: ModelQueue, module: nn.Module) -> bool:
        """Whether ``entry``'s model may run inline at all: measured on the device thread,
        never stalled, and under ``inline_bounded_only`` proven bounded (read once)."""
        if (not self.inline_s or entry.inline_refused is not None
                or entry.thread_runs < INLINE_AFTER_RUNS):
            return False
        if self.device.inline_bounded_only and not entry.graph_read:
            entry.graph_read = True
            reason = why_unbounded(module)
            if reason is not None:
                entry.inline_refused = f"not proven bounded by its input shapes: {reason}"
                log.info("%s on %s: batches stay on the device thread (%s)",
                         entry.config.name, self.device.label, entry.inline_refused)
                return False
        return True

    def run_inline(self, b: Batch) -> None:
        b.inline, b.threads = True, INLINE_THREADS
        cpu0 = time.thread_time()
        with_threads(INLINE_THREADS, run_on_cpu, b, self.tiers)
        b.inline_cpu_s = time.thread_time() - cpu0

    def stall(self, b: Batch) -> str | None:
        """Why ``b`` disqualifies its model from inline for good (None: it does not; the rule
        is ``policies.inline.is_stall``)."""
        took_s = b.device_s + b.copy_s
        if not is_stall(took_s, b.inline_cpu_s, self.inline_s,
                        bounded_only=self.device.inline_bounded_only):
            return None
        return f"a batch took {took_s * 1e3:.1f} ms, over {INLINE_STALL:g}x inline_ms"


def run_on_cpu(b: Batch, tiers: Residency) -> None:
    """The CPU device's work for ``b``, on the calling thread: the swap-in's copy, then the
    forward pass. Fills in the batch (an exception goes to ``b.error``, never up)."""
    try:
        b.copy_s = tiers.copy(b.swap) if b.swap is not None else 0.0
        t0, cpu0 = time.perf_counter(), time.thread_time()
        with torch.inference_mode():
            b.raw = b.module(*b.args)
        b.device_s = time.perf_counter() - t0
        b.device_cpu_s = time.thread_time() - cpu0
    except BaseException as e:  # noqa: BLE001 - handed to the worker with the batch
        b.error = e


def _rows_of(parts: list[tuple[Pending, int, int]], name: str) -> torch.Tensor:
    """One input's rows for the chunk, in order, as one CPU tensor (numpy rows are joined in
    numpy and converted once: a tensor slice costs ten times a numpy one)."""
    if len(parts) == 1 and parts[0][2] == parts[0][0].rows:  # one whole request
        rows = parts[0][0].inputs[name]
        return torch.from_numpy(rows) if isinstance(rows, np.ndarray) else rows
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
    if isinstance(raw, torch.Tensor) and len(config.outputs) == 1:
        return {config.outputs[0].name: raw}
    names = [t.name for t in config.outputs]
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if isinstance(raw, dict):
        return {n: raw[n] for n in names}
    if len(raw) != len(names):
        raise ValueError(f"model returned {len(raw)} outputs, config declares {names}")
    return dict(zip(names, raw, strict=True))
