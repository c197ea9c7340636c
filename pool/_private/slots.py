"""Executors that run several batches at once: how many each class may have in flight.

``StreamSlots`` is the bookkeeping (on the event loop); ``SlottedExecutor`` the executor base
that keeps it: the CUDA executor (a stream per class) and the benchmarks' CPU copy of its host
path (``benchmarks.gpu_suite.host_path``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable

from policies.priority import Priority
from pool._private.chunk import Batch
from pool._private.executor import DeviceExecutor
from pool._private.residency import Residency

__all__ = ["SlottedExecutor", "StreamSlots"]


class StreamSlots:
    """How many batches each class's stream holds: at least ``per_stream``, and beyond that
    while the estimated device work in flight on it stays under ``horizon_s``, up to
    ``most``.

    A count alone does not fit both ends of a zoo. Two 10 ms batches already keep a stream
    busy while the next decision is made; two 50 us batches of small models leave the GPU
    idle for the round trip through the waiter and the loop, which bounded the H100's
    capacity on 300 small models at about 950 requests/s (``docs/PERFORMANCE.md``, "Past
    capacity, the triage took the loop"). Bounding the work queued on a stream in time (about
    one chunk's worth, ``policies.scheduling.DEFAULT_CHUNK_MS``) keeps what a new batch of
    that class can wait behind on the device as short as before, however small the batches.
    Pure bookkeeping on the event loop: the executor adds a batch's estimate at launch and
    takes it off at completion."""

    def __init__(self, per_stream: int = 2, *, horizon_s: float = 0.002, most: int = 16) -> None:
        if not 1 <= per_stream <= most:
            raise ValueError(f"per_stream must be in [1, {most}], got {per_stream}")
        if horizon_s < 0:
            raise ValueError(f"horizon_s must be >= 0, got {horizon_s}")
        self.per_stream, self.horizon_s, self.most = per_stream, horizon_s, most
        self.count = [0, 0, 0, 0]  # per Priority value
        self.work_s = [0.0, 0.0, 0.0, 0.0]

    def has_room(self, priority: Priority) -> bool:
        n = self.count[priority]
        return n < self.per_stream or (n < self.most and self.work_s[priority] < self.horizon_s)

    def rooms(self) -> tuple[int, int, int, int]:
        """Per class, at most how many more may launch now (each launch is checked again)."""
        out = [0, 0, 0, 0]
        for p in range(4):
            n = self.count[p]
            cap = self.most if self.work_s[p] < self.horizon_s else self.per_stream
            out[p] = cap - n if cap > n else 0
        return out[0], out[1], out[2], out[3]

    def add(self, priority: Priority, work_s: float) -> None:
        self.count[priority] += 1
        self.work_s[priority] += work_s

    def remove(self, priority: Priority, work_s: float) -> None:
        self.count[priority] -= 1
        left = self.work_s[priority] - work_s
        self.work_s[priority] = left if self.count[priority] and left > 0 else 0.0


class SlottedExecutor(DeviceExecutor):
    """A device that runs several batches at once, per class as ``slots`` allows: a batch's
    estimated device time (rows at its model's cost per row, and its swap-in's copy) is
    counted in flight from launch to completion. Completions that come back in one turn of the
    loop are decided on together (``concurrent``)."""

    concurrent = True

    def __init__(self, tiers: Residency, on_done: Callable[[Batch], None],
                 slots: StreamSlots | None = None) -> None:
        super().__init__(on_done)
        self._tiers = tiers
        self.slots = slots or StreamSlots()

    def has_room(self, priority: Priority) -> bool:
        return self.slots.has_room(priority)

    def rooms(self) -> tuple[int, int, int, int]:
        return self.slots.rooms()

    def launch_limit(self) -> int:
        return sum(self.slots.rooms())

    def _submit(self, b: Batch) -> None:
        b.est_s = b.rows * b.entry.ewma_row_s + (
            self._tiers.copy_cost_s(b.swap) if b.swap is not None else 0.0)
        self.slots.add(b.priority, b.est_s)
        self._start(b)

    @abstractmethod
    def _start(self, b: Batch) -> None:
        """Hand ``b`` to the device's threads (its slot is counted)."""

    def _complete(self, b: Batch) -> None:
        self.slots.remove(b.priority, b.est_s)
        super()._complete(b)
