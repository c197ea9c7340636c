"""Cache counters (hits, misses, bypasses per tier, writes, skips)."""

from __future__ import annotations

from collections import Counter


class CacheCounters:
    """Monotonic counters keyed ``"<tier>.<event>"``, e.g. ``redis.bypass``."""

    def __init__(self) -> None:
        self._c: Counter[str] = Counter()

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self._c[name] += n

    def snapshot(self) -> dict[str, int]:
        """A copy of all counters, sorted by name."""
        return dict(sorted(self._c.items()))
