"""Recent outcomes per priority class over a sliding window: counts and latency histograms.

What the status views show per class (``timeshare status --watch``, ``/ui``): the pool records
each answered request's queue wait and compute (``pool._private.answers``) and its refusals;
the router records each request's end-to-end latency and whether it was shed or refused
(``router._private.model_stats``). One :class:`ClassWindow` holds, per class, a few named
duration series and a few named event counters.

**Window.** The last ``slots`` slots of ``slot_s`` seconds plus the current, partial one:
with the defaults (5 slots of 6 s) the last 30 to 36 s. Rates divide by the time the window
actually covers (shorter just after start), so they are not diluted.

**Bounded.** Memory is fixed: per slot, per class and series, ``BUCKETS`` counters. Durations
go into log-spaced buckets, 20 per decade from 10 µs to 1000 s (a value outside is counted in
the end bucket), and a percentile is read as its bucket's geometric middle: within 6 % of the
recorded value. Recording is one ``log`` and a few list increments; no sample is kept beyond
the last ``fold_at`` - 1 observations, recorded together (see :meth:`ClassWindow.observe`).

Not thread-safe: each owner records and reads on its own event loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from policies.priority import PRIORITIES

__all__ = ["BUCKETS", "FOLD_AT", "ClassWindow"]

_LOW_S = 1e-5  # the first bucket's lower edge (10 µs)
_PER_DECADE = 20
_DECADES = 8  # 10 µs .. 1000 s
BUCKETS = _PER_DECADE * _DECADES
_SCALE = _PER_DECADE / math.log(10.0)
_LOG_LOW = math.log(_LOW_S)
_log = math.log
_CLASSES = len(PRIORITIES)
FOLD_AT = 32  # observations kept aside before they are recorded (a bound, see observe)


def _middle_s(bucket: int) -> float:
    """The geometric middle of ``bucket`` (what a percentile in it reads as)."""
    return _LOW_S * 10.0 ** ((bucket + 0.5) / _PER_DECADE)


class ClassWindow:
    """Per priority class: requests, named counters and named duration series, over a window.

    ``series`` names the durations recorded per request (e.g. ``("queue", "compute")``);
    ``counters`` names the events counted without a duration (e.g. ``("refused",)``).

    >>> w = ClassWindow(series=("latency",), counters=("shed",), clock=lambda: 10.0)
    >>> w.observe(0, (0.020,))
    >>> w.count(2, 0)
    >>> s = w.snapshot()
    >>> s["by_class"]["realtime"]["requests"], s["by_class"]["batch"]["shed"]
    (1, 1)
    """

    def __init__(self, *, series: Sequence[str], counters: Sequence[str] = (),
                 slots: int = 5, slot_s: float = 6.0,
                 clock: Callable[[], float] = time.monotonic, fold_at: int = FOLD_AT) -> None:
        if slots < 1 or not slot_s > 0:
            raise ValueError(f"need slots >= 1 and slot_s > 0, got slots={slots}, "
                             f"slot_s={slot_s}")
        if not series:
            raise ValueError("series: name at least one duration series")
        if fold_at < 1:
            raise ValueError(f"fold_at must be >= 1, got {fold_at}")
        self._fold_at = fold_at
        self.series, self.counters = tuple(series), tuple(counters)
        self.slot_s = slot_s
        self.window_s = slots * slot_s
        self._clock = clock
        self._ring = slots + 1  # the whole slots and the current one
        self._width = len(self.series) * BUCKETS  # one class's histograms in a slot
        self._hist = [self._zeros_hist() for _ in range(self._ring)]
        self._sums = [[0.0] * (_CLASSES * len(self.series)) for _ in range(self._ring)]
        self._counts = [[0] * (_CLASSES * (1 + len(self.counters))) for _ in range(self._ring)]
        self._started = clock()
        self._k = int(self._started // slot_s)  # the current slot's number
        self._next_at = (self._k + 1) * slot_s  # when the next slot begins
        self._n_series, self._n_counts = len(self.series), 1 + len(self.counters)
        # Observations not yet folded in: at most fold_at - 1 (see observe).
        self._pending: list[tuple[int, Sequence[float], float]] = []
        self._current()

    def _zeros_hist(self) -> list[int]:
        return [0] * (_CLASSES * self._width)

    def _current(self) -> None:
        i = self._k % self._ring
        self._cur_hist, self._cur_sums, self._cur_counts = (
            self._hist[i], self._sums[i], self._counts[i])

    def _advance(self, now: float) -> None:
        """Move to the slot holding ``now``, clearing the slots that fell out of the window."""
        k = int(now // self.slot_s)
        if k > self._k:
            for j in range(max(self._k + 1, k - self._ring + 1), k + 1):
                i = j % self._ring
                self._hist[i] = self._zeros_hist()
                self._sums[i] = [0.0] * len(self._sums[i])
                self._counts[i] = [0] * len(self._counts[i])
            self._k = k
            self._next_at = (k + 1) * self.slot_s
            self._current()

    def observe(self, priority: int, durations_s: Sequence[float], *,
                now: float | None = None) -> None:
        """One request of class ``priority`` (``Priority`` or 0..3), with one duration (seconds)
        per series, in ``series`` order; ``now`` when the caller already read the clock.

        Kept aside and folded in ``fold_at`` at a time (and before any count or read, so every
        read sees what an immediate record would have shown): folded together, the histogram
        rows they touch stay in the CPU's caches, where one record per request found them cold
        (on the worker's loop, after the device thread ran: about 1 us a request)."""
        if now is None:
            now = self._clock()
        pending = self._pending
        pending.append((priority, durations_s, now))
        if len(pending) >= self._fold_at:
            self._fold()

    def _fold(self) -> None:
        for priority, durations_s, now in self._pending:
            self._record(priority, durations_s, now)
        self._pending.clear()

    def _record(self, priority: int, durations_s: Sequence[float], now: float) -> None:
        if now >= self._next_at:
            self._advance(now)
        hist, sums = self._cur_hist, self._cur_sums
        at = priority * self._width
        k = priority * self._n_series
        for d in durations_s:  # on the request path: no call per value
            if d > _LOW_S:  # its bucket, the last one holding everything beyond the range
                b = int((_log(d) - _LOG_LOW) * _SCALE)
                hist[at + (b if b < BUCKETS else BUCKETS - 1)] += 1
            else:
                hist[at] += 1
            sums[k] += d
            at += BUCKETS
            k += 1
        self._cur_counts[priority * self._n_counts] += 1

    def count(self, priority: int, counter: int, *, now: float | None = None) -> None:
        """One event of ``counters[counter]`` for class ``priority``."""
        if self._pending:
            self._fold()
        if now is None:
            now = self._clock()
        if now >= self._next_at:
            self._advance(now)
        self._cur_counts[priority * self._n_counts + 1 + counter] += 1

    def snapshot(self) -> dict[str, Any]:
        """Plain JSON: ``window_s`` (the window's span now) and ``by_class``: per class label,
        ``requests`` (observed in the window), ``rate_per_s``, each counter's count, and per
        series ``<name>_ms``: ``{"p50", "p99", "mean"}`` (None when no request)."""
        if self._pending:
            self._fold()
        now = self._clock()
        if now >= self._next_at:
            self._advance(now)
        covered = min(now - self._started,
                      (self._ring - 1) * self.slot_s + (now - self._k * self.slot_s))
        n_series, n_counts = self._n_series, self._n_counts
        by_class: dict[str, dict[str, Any]] = {}
        for p in PRIORITIES:
            counts = [sum(c[p * n_counts + j] for c in self._counts) for j in range(n_counts)]
            row: dict[str, Any] = {
                "requests": counts[0],
                "rate_per_s": counts[0] / covered if covered > 0 else 0.0,
            }
            for j, name in enumerate(self.counters):
                row[name] = counts[1 + j]
            for s, name in enumerate(self.series):
                start = p * self._width + s * BUCKETS
                merged = [sum(h[start + b] for h in self._hist) for b in range(BUCKETS)]
                total = sum(sums[p * n_series + s] for sums in self._sums)
                row[f"{name}_ms"] = _summary_ms(merged, total)
            by_class[p.label] = row
        return {"window_s": round(covered, 3), "by_class": by_class}


def _summary_ms(buckets: list[int], total_s: float) -> dict[str, float | None]:
    n = sum(buckets)
    if n == 0:
        return {"p50": None, "p99": None, "mean": None}
    return {"p50": _percentile_s(buckets, n, 0.50) * 1e3,
            "p99": _percentile_s(buckets, n, 0.99) * 1e3, "mean": total_s / n * 1e3}


def _percentile_s(buckets: list[int], n: int, q: float) -> float:
    rank = max(1, math.ceil(q * n))  # nearest rank
    seen = 0
    for b, c in enumerate(buckets):
        seen += c
        if seen >= rank:
            return _middle_s(b)
    return _middle_s(BUCKETS - 1)  # not reached: the counts add up to n
