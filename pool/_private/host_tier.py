"""The host tier: which models keep their weights in host memory (bounded, LRU back to disk).

Bookkeeping only; the worker drops the host buffers of the keys this returns. A model being
swapped in is protected so its source buffer never disappears mid-copy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["HostTier"]


class HostTier:
    """LRU set of host-resident model weights, bounded by ``budget_bytes`` (None: unbounded)."""

    def __init__(self, budget_bytes: int | None = None) -> None:
        if budget_bytes is not None and budget_bytes <= 0:
            raise ValueError(f"host_budget_bytes must be > 0 or None, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[str, int] = OrderedDict()
        self.drops = 0

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    @property
    def used_bytes(self) -> int:
        return sum(self._entries.values())

    def keys(self) -> list[str]:
        return list(self._entries)

    def touch(self, key: str) -> None:
        if key in self._entries:
            self._entries.move_to_end(key)

    def add(self, key: str, nbytes: int, *, protect: Iterable[str] = ()) -> list[str]:
        """Record ``key``; returns the keys dropped (least recently used first) to stay in budget.

        ``key`` itself and ``protect`` are never dropped, so the tier may exceed its budget while
        only protected entries are left.
        """
        self._entries[key] = nbytes
        self._entries.move_to_end(key)
        if self.budget_bytes is None:
            return []
        keep = {key, *protect}
        dropped = []
        used = self.used_bytes
        for k in list(self._entries):
            if used <= self.budget_bytes:
                break
            if k in keep:
                continue
            used -= self._entries.pop(k)
            dropped.append(k)
        self.drops += len(dropped)
        return dropped

    def remove(self, key: str) -> None:
        self._entries.pop(key, None)
