"""Per-device memory manager: which models are resident, and who leaves to make room.

Owns the residency bookkeeping of one device; asks ``policies.eviction`` for victims and calls
the owner's ``evict`` callback for each (the worker re-points the module at its host copy). A
model that is running or pinned is never evicted. Allocation is retried after each extra
eviction (fragmentation in the CPU arena, out-of-memory on CUDA) and the retries are bounded by
the number of resident models; when nothing more can go, :class:`DeviceOutOfMemory` is raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from policies.eviction import (
    EvictionDecision,
    EvictionPolicy,
    EvictionRequest,
    PriorityLruEviction,
    ResidentView,
)
from policies.priority import Priority
from pool._private.device_memory import DeviceMemory, Region
from pool.errors import DeviceOutOfMemory

__all__ = ["MemoryManager", "Resident"]

_NOTHING = EvictionDecision((), True, 0)


@dataclass(slots=True)
class Resident:
    """Bookkeeping of one resident model."""

    region: Region
    nbytes: int
    priority: Priority
    last_used: float
    reload_cost_s: float


class MemoryManager:
    """Residency of one device: capacity minus ``reserve_bytes`` (activations) holds weights."""

    def __init__(
        self,
        memory: DeviceMemory,
        *,
        reserve_bytes: int = 0,
        policy: EvictionPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if reserve_bytes < 0 or reserve_bytes >= memory.capacity_bytes:
            raise ValueError(
                f"reserve_bytes must be in [0, capacity={memory.capacity_bytes}), "
                f"got {reserve_bytes}"
            )
        self.memory = memory
        self.reserve_bytes = reserve_bytes
        self.policy = policy or PriorityLruEviction()
        self._clock = clock
        self._resident: dict[str, Resident] = {}
        self._used = 0  # sum of the residents' nbytes, kept as they come and go
        self._running: dict[str, int] = {}
        self._pinned: dict[str, int] = {}
        self.evictions = 0

    # -- queries ----------------------------------------------------------------------------
    @property
    def capacity_bytes(self) -> int:
        return self.memory.capacity_bytes - self.reserve_bytes

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    def is_resident(self, key: str) -> bool:
        return key in self._resident

    def region(self, key: str) -> Region | None:
        r = self._resident.get(key)
        return r.region if r else None

    def resident_keys(self) -> list[str]:
        return list(self._resident)

    def running_keys(self) -> list[str]:
        return list(self._running)

    def pinned_keys(self) -> list[str]:
        return list(self._pinned)

    # -- state changes ----------------------------------------------------------------------
    def touch(self, key: str, now: float | None = None) -> None:
        """``key`` was used (``now``: the clock's time, when the caller has read it)."""
        r = self._resident.get(key)
        if r is not None:
            r.last_used = self._clock() if now is None else now

    @contextmanager
    def running(self, key: str) -> Iterator[None]:
        """While inside, ``key`` is never chosen as a victim."""
        self.start_running(key)
        try:
            yield
        finally:
            self.stop_running(key)

    def start_running(self, key: str) -> None:
        """A batch of ``key`` is on the device: never a victim until :meth:`stop_running`
        (the worker calls it when the batch's completion is seen, so a region is never freed
        while a stream may still read it)."""
        self._running[key] = self._running.get(key, 0) + 1

    def stop_running(self, key: str) -> None:
        _release_one(self._running, key)

    def pin(self, key: str) -> None:
        """A caller keeps ``key`` resident until :meth:`unpin` (e.g. while it is being filled)."""
        self._pinned[key] = self._pinned.get(key, 0) + 1

    def unpin(self, key: str) -> None:
        _release_one(self._pinned, key)

    def admit(
        self,
        key: str,
        nbytes: int,
        *,
        priority: Priority,
        reload_cost_s: float,
        queued: Mapping[str, Priority],
        evict: Callable[[str], None],
    ) -> Region:
        """Reserve a region for ``key``, evicting victims through ``evict`` if needed.

        ``queued`` maps each model with queued work to its most urgent queued class. Raises
        DeviceOutOfMemory when not enough can be evicted.
        """
        if key in self._resident:
            self.touch(key)
            return self._resident[key].region
        if nbytes > self.capacity_bytes:
            raise DeviceOutOfMemory(
                f"{key} needs {nbytes} bytes, device capacity for weights is {self.capacity_bytes}"
            )
        free = self.free_bytes
        # Views of every resident are built only when something must leave.
        decision = (_NOTHING if nbytes <= free
                    else self.policy.choose(self._request(nbytes, free, priority, queued)))
        if not decision.feasible:
            raise DeviceOutOfMemory(
                f"{key} needs {nbytes} bytes, {self.free_bytes} free and not enough evictable"
            )
        for victim in decision.victims:
            self._evict(victim, evict)
        region = self._allocate_evicting(nbytes, priority, queued, evict, key)
        self._resident[key] = Resident(region, nbytes, priority, self._clock(), reload_cost_s)
        self._used += nbytes
        return region

    def release(self, key: str) -> None:
        """Forget ``key`` (the owner already stopped using its region)."""
        r = self._resident.pop(key, None)
        if r is not None:
            self._used -= r.nbytes
            self.memory.release(r.region)

    def evict_idle(self, evict: Callable[[str], None], *, keep: str | None = None) -> int:
        """Evict every resident that is not running, pinned or ``keep``; returns how many."""
        victims = [
            k for k in self._resident
            if k != keep and k not in self._running and k not in self._pinned
        ]
        for k in victims:
            self._evict(k, evict)
        return len(victims)

    # -- internals --------------------------------------------------------------------------
    def _request(
        self, need: int, free: int, priority: Priority, queued: Mapping[str, Priority]
    ) -> EvictionRequest:
        views = tuple(
            ResidentView(
                key=k,
                nbytes=r.nbytes,
                priority=r.priority,
                last_used=r.last_used,
                reload_cost_s=r.reload_cost_s,
                queued_priority=queued.get(k),
                running=k in self._running,
                pinned=k in self._pinned,
            )
            for k, r in self._resident.items()
        )
        return EvictionRequest(need, free, priority, self._clock(), views)

    def _evict(self, key: str, evict: Callable[[str], None]) -> None:
        if key in self._running or key in self._pinned:
            raise AssertionError(f"policy chose {key}, which is running or pinned")
        evict(key)
        self.release(key)
        self.evictions += 1

    def _allocate_evicting(self, nbytes, priority, queued, evict, key) -> Region:
        # Bounded: each retry evicts one more resident model.
        for _ in range(len(self._resident) + 1):
            region = self.memory.allocate(nbytes)
            if region is not None:
                return region
            more = self.policy.choose(self._request(1, 0, priority, queued))
            if not more.victims:
                break
            self._evict(more.victims[0], evict)
        raise DeviceOutOfMemory(f"{key}: allocation of {nbytes} bytes failed after evicting")


def _release_one(counts: dict[str, int], key: str) -> None:
    """One holder of ``key`` lets go (the key leaves ``counts`` with its last holder)."""
    n = counts.get(key, 0) - 1
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)
