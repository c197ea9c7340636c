"""Device executors: where a worker's batches run, and how their completion comes back.

The worker's loop decides and launches; it never waits for the device. An executor takes a
launched :class:`~pool._private.chunk.Batch`, runs it, and calls the worker's ``on_done(batch)``
on the event loop when the device is done with it (``loop.call_soon_threadsafe``: the one way
back onto the loop). ``has_room(priority)`` bounds the batches in flight.

- :class:`ThreadExecutor` (the CPU stand-in): one thread stands in for the device and runs one
  batch at a time (a swap-in's copy, then the forward pass). One batch in flight: the
  scheduler decides again as each completes, which is the host-side preemption the stand-in
  needs (chunks, ``policies.scheduling``).
- :class:`~pool._private.cuda_executor.CudaExecutor`: a launcher thread enqueues each batch on
  its class's stream and a waiter per stream answers it when its event completes; several
  batches per stream are in flight, and the GPU's stream priorities do the preemption.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from policies.priority import Priority
from pool._private.chunk import Batch, run_on_cpu
from pool._private.residency import Residency
from pool.device import DeviceSpec

__all__ = ["DeviceExecutor", "ThreadExecutor"]

Job = Callable[[], None]


class DeviceExecutor(ABC):
    """Runs launched batches; answers each through ``on_done`` on the event loop."""

    def __init__(self, on_done: Callable[[Batch], None]) -> None:
        self._on_done = on_done
        self.in_flight = 0
        self.launched = 0  # batches ever launched (status)

    @abstractmethod
    def has_room(self, priority: Priority) -> bool:
        """Whether a batch of this class may be launched now."""

    def has_any_room(self) -> bool:
        """Whether a batch of some class may be launched now (skips a decision when not)."""
        return any(self.has_room(p) for p in Priority)

    def launch(self, b: Batch) -> None:
        """Hand ``b`` to the device and return at once (event loop thread)."""
        b.loop = asyncio.get_running_loop()  # the completion comes back to the launching loop
        self.in_flight += 1
        self.launched += 1
        self._submit(b)

    @abstractmethod
    def _submit(self, b: Batch) -> None:
        """Start ``b``; call :meth:`_complete_threadsafe` (or :meth:`_complete` on the loop)
        when the device is done with it."""

    @abstractmethod
    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` where the device's work runs (warm-up of a new model)."""

    @abstractmethod
    def close(self) -> None:
        """Stop the threads; batches still in flight are never answered (the worker fails
        their requests)."""

    def _complete(self, b: Batch) -> None:
        self.in_flight -= 1
        self._on_done(b)

    def _complete_threadsafe(self, b: Batch) -> None:
        assert b.loop is not None
        try:
            b.loop.call_soon_threadsafe(self._complete, b)
        except RuntimeError:  # the loop is closed: the worker is gone, nobody to answer
            pass


class JobThread:
    """One daemon thread running jobs in order from a queue (``None`` stops it), with
    ``threads`` torch intra-op threads (a per-OS-thread setting in torch)."""

    def __init__(self, name: str, threads: int | None) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = threads
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._started = False

    def put(self, job: Job) -> None:
        if not self._started:
            self._started = True
            self._thread.start()
        self._jobs.put(job)

    def stop(self) -> None:
        if self._started:
            self._jobs.put(None)

    def _serve(self) -> None:
        if self._threads:
            torch.set_num_threads(self._threads)
        while (job := self._jobs.get()) is not None:
            job()


async def call_in(thread: JobThread, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on ``thread``, awaited from the loop (its exception re-raised here)."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if fut.done():  # the caller was cancelled meanwhile
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def job() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            result, error = None, e
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # loop closed
            pass

    thread.put(job)
    return await fut


class ThreadExecutor(DeviceExecutor):
    """The CPU stand-in: one thread is the device, one batch at a time."""

    def __init__(self, device: DeviceSpec, tiers: Residency,
                 on_done: Callable[[Batch], None]) -> None:
        super().__init__(on_done)
        self._tiers = tiers
        self._thread = JobThread(f"timeshare-{device.label}",
                                 device.threads or torch.get_num_threads())

    def has_room(self, priority: Priority) -> bool:
        return self.in_flight == 0

    def has_any_room(self) -> bool:
        return self.in_flight == 0

    def _submit(self, b: Batch) -> None:
        self._thread.put(lambda: self._run(b))

    def _run(self, b: Batch) -> None:
        run_on_cpu(b, self._tiers)
        self._complete_threadsafe(b)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await call_in(self._thread, fn, *args)

    def close(self) -> None:
        self._thread.stop()
