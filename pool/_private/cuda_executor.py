"""The CUDA executor: the host launches and moves on; the GPU's streams do the sharing.

Three kinds of thread, none of which waits on the device except the waiters:

- the **event loop** decides and calls :meth:`CudaExecutor.launch`, which only queues the batch
  for the launcher (microseconds);
- the **launcher** (one per device) enqueues each batch on its class's stream
  (``pool._private.streams``: realtime on the most urgent level): a pending swap-in's copy on
  the copy stream (compute waits on its event, on the device; a model of at least
  ``PIPELINED_BYTES`` uses the layer-group pipelined copy), the inputs staged through pinned
  host buffers and copied non-blocking, the forward pass, the outputs copied non-blocking into
  pinned host buffers, and a (begin, done) event pair around it. Then it moves to the next
  batch: batches of several models and classes are in flight at once, on each stream at
  least two and more while their estimated work stays under about a chunk (``StreamSlots``);
- one **waiter** per stream blocks on the done events of its stream's batches in order (work
  on one stream completes in order) and hands each batch back to the loop. A waiter per stream,
  not per device, so a realtime batch is answered as soon as it is done even while a long
  background batch is still running.

Pinned buffers come from PyTorch's caching host allocator, which is a pool: a block used by a
non-blocking copy is reused only once that copy's stream has passed it (the allocator records
an event on it). Device tensors of a batch are allocated on its stream and freed there, so the
caching allocator's stream-ordered reuse is safe without ``record_stream``. A model's region is
read only by batches counted as running (``MemoryManager.start_running``), which the worker
stops counting when their done event has completed; so a region is never freed while a stream
may still read it.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from pool._private.chunk import Batch
from pool._private.events import EventPool
from pool._private.executor import JobThread, call_in
from pool._private.residency import Residency
from pool._private.slots import SlottedExecutor, StreamSlots
from pool.device import DeviceSpec

__all__ = ["PIPELINED_BYTES", "CudaExecutor"]

# A swap-in of at least this many bytes uses the pipelined copy on the serving path: its first
# layers compute while later ones copy (PipeSwitch). Smaller copies are over in well under a
# millisecond on PCIe 4+ and gain nothing from being split.
PIPELINED_BYTES = 64 << 20

Waiting = tuple[Batch, "torch.cuda.Event | None"]


class CudaExecutor(SlottedExecutor):
    """Batches on the compute streams of ``tiers`` (one per class), as many in flight on each
    as ``slots`` allows (:class:`~pool._private.slots.StreamSlots`)."""

    def __init__(self, device: DeviceSpec, tiers: Residency, on_done: Callable[[Batch], None],
                 *, slots: StreamSlots | None = None) -> None:
        super().__init__(tiers, on_done, slots)
        assert tiers.compute_streams is not None, "a CUDA residency has compute streams"
        self._device = device.torch_device
        self.streams = tiers.compute_streams
        self._events = EventPool(self._device)
        self._launcher = JobThread(f"timeshare-{device.label}-launch", device.threads)
        self._waiting: dict[int, queue.SimpleQueue[Waiting | None]] = {}
        self._waiters: list[JobThread] = []
        for stream in {id(s): s for s in self.streams.values()}.values():
            q: queue.SimpleQueue[Waiting | None] = queue.SimpleQueue()
            self._waiting[id(stream)] = q
            waiter = JobThread(f"timeshare-{device.label}-wait", None)
            waiter.put(partial(self._wait, q))
            self._waiters.append(waiter)

    def _start(self, b: Batch) -> None:
        self._launcher.put(lambda: self._enqueue(b))

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await call_in(self._launcher, fn, *args)

    def close(self) -> None:
        self._launcher.stop()
        for q in self._waiting.values():
            q.put(None)  # ends the waiter's loop, then its thread
        for waiter in self._waiters:
            waiter.stop()

    # -- the launcher thread -------------------------------------------------------------
    def _enqueue(self, b: Batch) -> None:
        stream = self.streams[b.priority]
        try:
            with torch.cuda.stream(stream), torch.inference_mode():
                pipelined = None
                if b.swap is not None:
                    if b.swap.dst is not None and b.swap.packed.nbytes >= PIPELINED_BYTES:
                        pipelined = self._tiers.copy_pipelined(b.swap)
                    else:
                        b.copy_s = self._tiers.copy(b.swap)  # enqueued; compute waits on it
                begin, done = self._events.take()
                begin.record(stream)
                args = [self._stage(a, b.keep) for a in b.args]
                if pipelined is not None:
                    with pipelined.hooks(b.module):
                        raw = b.module(*args)
                else:
                    raw = b.module(*args)
                b.raw = _to_pinned(raw)
                done.record(stream)
            b.events = (begin, done)
            self._waiting[id(stream)].put((b, None))
        except BaseException as e:  # noqa: BLE001 - answered with the batch (OOM: retried)
            b.error = e
            self._waiting[id(stream)].put((b, _fence(stream)))

    def _stage(self, a: torch.Tensor, keep: list) -> torch.Tensor:
        """A CPU input through a pinned staging buffer to the device, non-blocking."""
        if not a.is_pinned():
            buf = torch.empty(a.shape, dtype=a.dtype, pin_memory=True)
            buf.copy_(a)
            keep.append(buf)
            a = buf
        return a.to(self._device, non_blocking=True)

    # -- the waiter threads --------------------------------------------------------------
    def _wait(self, q: queue.SimpleQueue[Waiting | None]) -> None:
        while (item := q.get()) is not None:
            b, fence = item
            t0 = time.perf_counter()
            try:
                if b.events is not None:
                    begin, done = b.events
                    done.synchronize()
                    b.device_s = begin.elapsed_time(done) / 1e3
                    self._events.give(b.events)
                    b.events = None
                elif fence is not None:
                    fence.synchronize()  # what was enqueued before the failure has finished
            except BaseException as e:  # noqa: BLE001 - a sticky CUDA error: answer, not hang
                b.error = b.error or e
                b.device_s = time.perf_counter() - t0
            b.keep.clear()
            self._complete_threadsafe(b)


def _fence(stream: torch.cuda.Stream) -> torch.cuda.Event | None:
    try:
        ev = torch.cuda.Event()
        ev.record(stream)
        return ev
    except Exception:  # noqa: BLE001 - the device is in an error state: nothing to wait for
        return None


def _to_pinned(raw: Any) -> Any:
    """The model's device outputs copied non-blocking into pinned host tensors (same shape)."""
    if isinstance(raw, torch.Tensor):
        return _pinned_copy(raw)
    if isinstance(raw, dict):
        return {k: _pinned_copy(v) for k, v in raw.items()}
    return tuple(_pinned_copy(v) for v in raw)


def _pinned_copy(t: torch.Tensor) -> torch.Tensor:
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    return host
