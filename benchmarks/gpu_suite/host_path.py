"""The CUDA executor's host path on the CPU, for the capacity sweep's CPU run.

On CUDA the worker's loop hands each batch to a launcher thread, a waiter thread hands it back
through ``loop.call_soon_threadsafe``, several batches are in flight per class
(``pool._private.cuda_executor.StreamSlots``) and completions are decided on together. The CPU
stand-in (``ThreadExecutor``) runs one batch at a time, small ones inline on the loop, so the
sweep's CPU run never exercised that path; the H100 then showed it collapsing past capacity
on zoos of small models (``docs/GPU.md``, "NVIDIA H100, 2026-11-28").

:class:`LaunchWaitExecutor` is that path with the CPU as the device: the launcher thread runs
the swap-in's copy and the forward pass itself, a waiter thread answers each batch, and the
same ``StreamSlots`` bound what is in flight. Its figures say how the worker's decisions and
hops hold up past capacity on this host's CPU; no figure from it is a GPU figure.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

from pool._private.chunk import Batch, run_on_cpu
from pool._private.executor import JobThread, call_in
from pool._private.residency import Residency
from pool._private.slots import SlottedExecutor, StreamSlots
from pool.device import DeviceSpec

__all__ = ["LaunchWaitExecutor"]


class LaunchWaitExecutor(SlottedExecutor):
    """A launcher thread that runs each batch, a waiter thread that answers it; the CUDA
    executor's slots and its decision path."""

    def __init__(self, device: DeviceSpec, tiers: Residency, on_done: Callable[[Batch], None],
                 *, slots: StreamSlots | None = None) -> None:
        super().__init__(tiers, on_done, slots)
        self._launcher = JobThread(f"host-path-{device.label}-launch", device.threads)
        self._done: queue.SimpleQueue[Batch | None] = queue.SimpleQueue()
        self._waiter = JobThread(f"host-path-{device.label}-wait", None)
        self._waiter.put(self._wait)

    def _start(self, b: Batch) -> None:
        self._launcher.put(lambda: self._run(b))

    def _run(self, b: Batch) -> None:
        run_on_cpu(b, self._tiers)
        self._done.put(b)

    def _wait(self) -> None:
        while (b := self._done.get()) is not None:
            self._complete_threadsafe(b)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await call_in(self._launcher, fn, *args)

    def close(self) -> None:
        self._launcher.stop()
        self._done.put(None)
        self._waiter.stop()
