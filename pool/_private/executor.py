"""Device executors: where a worker's batches run, and how their completion comes back.

The worker's loop decides and launches; it never waits for the device. An executor takes a
launched :class:`~pool._private.chunk.Batch`, runs it, and calls the worker's ``on_done(batch)``
on the event loop when the device is done with it (``loop.call_soon_threadsafe``: the one way
back onto the loop). ``has_room(priority)`` bounds the batches in flight.

- :class:`ThreadExecutor` (the CPU stand-in): one thread stands in for the device and runs one
  batch at a time (a swap-in's copy, then the forward pass). Two batches in flight: the one
  running and the next, which the thread starts the moment the first is done, without a turn
  of the loop in between. A launch more urgent than the batch waiting takes its place, and the
  worker queues that batch's rows again: a realtime arrival still waits for the running batch
  only, the host-side preemption the stand-in needs (chunks, ``policies.scheduling``).
- :class:`~pool._private.cuda_executor.CudaExecutor`: a launcher thread enqueues each batch on
  its class's stream and a waiter per stream answers it when its event completes; several
  batches per stream are in flight, and the GPU's stream priorities do the preemption.
"""

from __future__ import annotations

import asyncio
import collections
import os
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from common.fallback_types import DeadlineTooShort, RequestExpired
from policies.priority import Priority
from pool._private.chunk import Batch, run_on_cpu, with_threads
from pool._private.residency import Residency
from pool.device import DeviceSpec

__all__ = ["DeviceExecutor", "ThreadExecutor"]

Job = Callable[[], None]


class DeviceExecutor(ABC):
    """Runs launched batches; answers each through ``on_done`` on the event loop."""

    # Whether a launch may displace a batch waiting to start (``launch`` returns it): then
    # ``has_room`` of an urgent class can say yes while ``has_any_room`` says no.
    displaces = False
    # Whether batches launched and not yet started run most urgent class first (the worker
    # clears it for a policy where classes do not order the work: FIFO).
    class_order = True
    # Whether several batches run at once (CUDA streams): then completions that come back in
    # one turn of the loop are decided on together.
    concurrent = False

    def __init__(self, on_done: Callable[[Batch], None]) -> None:
        self._on_done = on_done
        self.in_flight = 0
        self.launched = 0  # batches ever launched (status)

    @abstractmethod
    def has_room(self, priority: Priority) -> bool:
        """Whether a batch of this class may be launched now."""

    def has_any_room(self) -> bool:
        """Whether a batch of any class may be launched now (skips a decision when not;
        ``has_room`` of the most urgent class may still say yes)."""
        return any(self.has_room(p) for p in Priority)

    def rooms(self) -> tuple[int, int, int, int]:
        """Per class (index = ``Priority`` value): how many batches of it may launch now."""
        return tuple(1 if self.has_room(p) else 0 for p in Priority)  # type: ignore[return-value]

    def launch_limit(self) -> int:
        """How many batches one decision round may launch (``SchedulingPolicy.plan``): one
        where the device runs one batch at a time."""
        return 1

    def launched_s(self) -> tuple[float, float, float, float]:
        """Per class (index = ``Priority`` value): estimated device seconds launched and not
        yet started that a new batch of that class would wait behind (none where the device
        orders its own work: CUDA)."""
        return (0.0, 0.0, 0.0, 0.0)

    def launched_depth(self) -> tuple[int, int, int, int]:
        """Requests per class (index = ``Priority`` value) in batches launched and not yet
        started, whose callers still wait and whose rows are all launched (none where the
        device orders its own work)."""
        return (0, 0, 0, 0)

    def busy_until(self) -> float:
        """When (on the worker's clock) the batch running now should be done, by its
        decision's estimate: the earliest a batch launched now can start (0: unknown, or
        nothing running; CUDA streams overlap their work)."""
        return 0.0

    def launch(self, b: Batch) -> Batch | None:
        """Hand ``b`` to the device and return at once (event loop thread). Returns a batch
        launched before and not started that ``b`` displaced (``has_room`` said so: it is less
        urgent), which is never run nor answered: the caller queues its rows again."""
        b.loop = asyncio.get_running_loop()  # the completion comes back to the launching loop
        self.in_flight += 1
        self.launched += 1
        displaced = self._submit(b)
        if displaced is not None:
            self.in_flight -= 1
        return displaced

    @abstractmethod
    def _submit(self, b: Batch) -> Batch | None:
        """Start ``b``; call :meth:`_complete_threadsafe` (or :meth:`_complete` on the loop)
        when the device is done with it. Returns the batch it displaced, if any."""

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
    """One daemon thread running jobs in order (``None`` stops it), with ``threads`` torch
    intra-op threads (a per-OS-thread setting in torch).

    A sleeping thread is woken by a byte written to a pipe, a call that lets go of the GIL for
    the write: the woken thread, often scheduled at once (it has used less CPU than the caller),
    finds the GIL free and runs its job. Woken from ``queue.SimpleQueue.put``, which holds the
    GIL throughout, it found the GIL taken, slept again until the caller's loop next let go of
    it, and was woken a second time: on one core two extra thread switches per job (the device
    worker's per-request switches went from 5.6 to 2, ``docs/PERFORMANCE.md``, issue 41). A
    thread that is busy is not woken: it takes the next job when it is done.
    """

    def __init__(self, name: str, threads: int | None) -> None:
        self._jobs: collections.deque[Job | None] = collections.deque()
        # Bounded: one byte per sleep at most (``put`` clears ``_sleeping`` before writing).
        self._wake_r, self._wake_w = os.pipe()
        # Closed once this object is gone (its thread, which holds it, has ended); not at exit,
        # where a daemon thread may still be reading.
        weakref.finalize(self, _close_fds, self._wake_r, self._wake_w).atexit = False
        self._sleeping = False  # the thread waits (or is about to) on the pipe
        self._threads = threads
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._started = False

    def put(self, job: Job | None) -> None:
        """Run ``job`` after those before it (``None``: stop once they are done)."""
        if not self._started:
            if job is None:
                return
            self._started = True
            self._thread.start()
        self._jobs.append(job)
        if self._sleeping:
            self._sleeping = False
            os.write(self._wake_w, b"\0")

    def stop(self) -> None:
        self.put(None)

    def _serve(self) -> None:
        if self._threads:
            torch.set_num_threads(self._threads)
        jobs = self._jobs
        while True:
            if jobs:
                job = jobs.popleft()
                if job is None:
                    return
                job()
                continue
            self._sleeping = True
            if not jobs:  # (a job pushed before the flag was set did not write: run it)
                os.read(self._wake_r, 64)  # a stale byte at most: an extra turn, no job lost
            self._sleeping = False


def _close_fds(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


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
    """The CPU stand-in: one thread is the device, one batch at a time, the next one waiting.

    With one batch in flight the device idled while its completion went back to the loop and
    the loop decided the next: about 1 ms per batch behind a loop busy with 150 requests/s from
    Ray Serve's proxy, 5 % of a 20 ms model's capacity (``docs/PERFORMANCE.md``, "The device
    waited for the loop"). Now the next batch waits on the device side and the thread runs
    straight into it. A launch more urgent than the waiting batch displaces it (``launch``
    returns it; the worker queues its rows again, where the scheduler decides on them afresh
    and expires what can no longer make it), so a waiting batch never waits behind more than
    the running one, and an urgent arrival never waits behind the waiting one. A batch whose
    every caller is gone by the time it would start (answered, cancelled, past its deadline)
    is not run, nor is one that can no longer finish in time.
    """

    DEPTH = 2  # batches in flight: the running one and the next
    displaces = True

    def __init__(self, device: DeviceSpec, tiers: Residency,
                 on_done: Callable[[Batch], None]) -> None:
        super().__init__(on_done)
        self._tiers = tiers
        self._clock = tiers.clock
        self._busy_until = 0.0  # written by the thread as it starts and ends each batch
        self._thread = JobThread(f"timeshare-{device.label}",
                                 device.threads or torch.get_num_threads())
        self._waiting: list[Batch] = []  # launched, not started: the thread takes the first
        self._lock = threading.Lock()

    def has_room(self, priority: Priority) -> bool:
        if self.in_flight < self.DEPTH:
            return True
        if self.in_flight > self.DEPTH:
            return False
        with self._lock:  # (the thread may take the last waiting batch between two reads)
            waiting = self._waiting
            return bool(waiting) and priority < waiting[-1].priority

    def has_any_room(self) -> bool:
        # the free slots only: displacing is for work more urgent than the batch waiting
        # (``DeviceWorker`` asks ``has_room`` of the most urgent class queued)
        return self.in_flight < self.DEPTH

    def launched_s(self) -> tuple[float, float, float, float]:
        # what waits runs ahead of every class it would not yield to (each batch at its
        # model's cost per row now, as the queue's estimates count it)
        ahead = [0.0, 0.0, 0.0, 0.0]
        for b in list(self._waiting):
            work = b.rows * b.entry.ewma_row_s
            for cls in range(int(b.priority), 4):
                ahead[cls] += work
        return ahead[0], ahead[1], ahead[2], ahead[3]

    def launched_depth(self) -> tuple[int, int, int, int]:
        depth = [0, 0, 0, 0]
        for b in list(self._waiting):
            for p, _, _ in b.parts:
                # (one with rows still to launch is counted with the worker's queue)
                if p.launched >= p.rows and not p.future.done():
                    depth[p.priority] += 1
        return depth[0], depth[1], depth[2], depth[3]

    def _submit(self, b: Batch) -> Batch | None:
        displaced = None
        with self._lock:
            waiting = self._waiting
            if self.in_flight > self.DEPTH and waiting and b.priority < waiting[-1].priority:
                displaced = waiting.pop()  # the least urgent, launched last
            # most urgent first, in launch order within a class (a list of one or two); in
            # launch order alone where classes do not order the work (FIFO)
            at = next((i for i, w in enumerate(waiting) if b.priority < w.priority),
                      len(waiting)) if self.class_order else len(waiting)
            waiting.insert(at, b)
        if displaced is None:
            self._thread.put(self._run_next)  # one pull per batch that stays
        return displaced

    def busy_until(self) -> float:
        return self._busy_until

    def _run_next(self) -> None:
        with self._lock:
            b = self._waiting.pop(0)
        self._busy_until = self._clock() + b.work_s
        try:
            self._run(b)
        finally:
            self._busy_until = 0.0
        self._complete_threadsafe(b)

    def _run(self, b: Batch) -> None:
        if self._hopeless(b):
            # no caller can use it any more: not run (the worker fails its requests with this,
            # and a swap-in it carried is aborted). Its requests arrived at an idle device and
            # it launched alone: no other work made it late, its deadlines were shorter than
            # its own work and the pool's fixed costs (a 504 for the caller, not a 503).
            if b.alone and all(p.idle for p, _, _ in b.parts):
                b.error = DeadlineTooShort(f"{b.name}: its deadline is shorter than its own "
                                           "estimated work on this device (not run): ask for "
                                           "a longer deadline")
            else:
                b.error = RequestExpired(f"{b.name}: the batch could no longer finish within "
                                         "its deadlines when its turn came (not run)")
        elif b.threads:
            with_threads(b.threads, run_on_cpu, b, self._tiers)  # (sets it only if it differs)
        else:
            run_on_cpu(b, self._tiers)

    def _hopeless(self, b: Batch) -> bool:
        """Every request of ``b`` is answered or cancelled, or its deadline comes before the
        batch would finish (``work_s``: the decision's estimate, 0 where it had none). The
        worker decided on ``b`` before the batch ahead of it was done; this is its check at the
        moment it would start. (The futures' state is read from the device thread: a stale read
        only runs the batch.)"""
        done_at = self._clock() + b.work_s
        for p, _, _ in b.parts:
            if not p.future.done() and (p.deadline is None or done_at < p.deadline):
                return False
        return True

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await call_in(self._thread, fn, *args)

    def close(self) -> None:
        self._thread.stop()
