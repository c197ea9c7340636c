"""In-process LRU tier: bounded by entries and bytes, TTL per entry, injected clock."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from router.cache.types import CachedAnswer


@dataclass(frozen=True, slots=True)
class _Entry:
    answer: CachedAnswer
    nbytes: int
    expires_at: float


class MemoryLRU:
    """LRU map key -> answer. Bounds: ``max_entries`` entries and ``max_bytes`` output bytes.

    Expired entries are dropped when read; otherwise they age out in LRU order like any other
    entry. Not thread-safe: used from the event loop only.
    """

    def __init__(self, *, max_entries: int, max_bytes: int, clock: Callable[[], float]) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._clock = clock
        self._data: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        """Bytes currently held."""
        return self._bytes

    def get(self, key: str) -> CachedAnswer | None:
        """The live answer under ``key`` (and mark it recently used), or None."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if entry.expires_at <= self._clock():
            self._remove(key)
            return None
        self._data.move_to_end(key)
        return entry.answer

    def put(self, key: str, answer: CachedAnswer, *, ttl_s: float, nbytes: int) -> bool:
        """Store ``answer`` for ``ttl_s``; False when it alone exceeds the byte bound."""
        if nbytes > self._max_bytes:
            return False
        if key in self._data:
            self._remove(key)
        self._data[key] = _Entry(answer, nbytes, self._clock() + ttl_s)
        self._bytes += nbytes
        while len(self._data) > self._max_entries or self._bytes > self._max_bytes:
            self._remove(next(iter(self._data)))
        return True

    def clear(self) -> None:
        """Drop everything."""
        self._data.clear()
        self._bytes = 0

    def _remove(self, key: str) -> None:
        entry = self._data.pop(key)
        self._bytes -= entry.nbytes
