"""Sliding windows of call outcomes (resilience4j's count- and time-based aggregations).

All windows keep running totals so a rate is O(1), and all are bounded: the count window holds
``size`` outcomes, the time windows at most ``ceil(size_s)`` one-second buckets.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["CountWindow", "TimeBuckets", "TimeWindow", "Totals"]


@dataclass(frozen=True, slots=True)
class Totals:
    """Calls, failed calls and slow calls in a window."""

    calls: int = 0
    failed: int = 0
    slow: int = 0


class TimeBuckets:
    """``n`` integer counters summed over the last ``size_s`` seconds (one bucket per second)."""

    def __init__(self, size_s: float, n: int) -> None:
        if size_s <= 0:
            raise ValueError(f"window size must be > 0 seconds, got {size_s}")
        self._size = max(1, math.ceil(size_s))
        self._buckets: deque[tuple[int, list[int]]] = deque()
        self._sum = [0] * n

    def _evict(self, now: float) -> int:
        second = math.floor(now)
        oldest_kept = second - self._size + 1
        while self._buckets and self._buckets[0][0] < oldest_kept:
            _, old = self._buckets.popleft()
            for i, v in enumerate(old):
                self._sum[i] -= v
        return second

    def add(self, now: float, *values: int) -> None:
        second = self._evict(now)
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append((second, [0] * len(self._sum)))
        bucket = self._buckets[-1][1]
        for i, v in enumerate(values):
            bucket[i] += v
            self._sum[i] += v

    def totals(self, now: float) -> tuple[int, ...]:
        self._evict(now)
        return tuple(self._sum)


class CountWindow:
    """The last ``size`` outcomes (a ring buffer)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"sliding_window_size must be >= 1, got {size}")
        self._ring: deque[tuple[bool, bool]] = deque(maxlen=size)
        self._calls = self._failed = self._slow = 0

    def record(self, now: float, *, failed: bool, slow: bool) -> None:
        if len(self._ring) == self._ring.maxlen:
            old_failed, old_slow = self._ring[0]
            self._calls -= 1
            self._failed -= old_failed
            self._slow -= old_slow
        self._ring.append((failed, slow))
        self._calls += 1
        self._failed += failed
        self._slow += slow

    def counts(self, now: float) -> tuple[int, int, int]:
        """``(calls, failed, slow)``: the breaker's per-call check, without a ``Totals``."""
        return self._calls, self._failed, self._slow

    def snapshot(self, now: float) -> Totals:
        return Totals(self._calls, self._failed, self._slow)


class TimeWindow:
    """Outcomes of the last ``size_s`` seconds."""

    def __init__(self, size_s: int) -> None:
        if size_s < 1:
            raise ValueError(f"sliding_window_size must be >= 1 (seconds), got {size_s}")
        self._buckets = TimeBuckets(size_s, 3)

    def record(self, now: float, *, failed: bool, slow: bool) -> None:
        self._buckets.add(now, 1, int(failed), int(slow))

    def counts(self, now: float) -> tuple[int, int, int]:
        """``(calls, failed, slow)``: the breaker's per-call check, without a ``Totals``."""
        calls, failed, slow = self._buckets.totals(now)
        return calls, failed, slow

    def snapshot(self, now: float) -> Totals:
        return Totals(*self._buckets.totals(now))
