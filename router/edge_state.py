"""What the edge (``router.edge``) keeps between requests: work in flight per class, the measured
seconds per request, the admitted rate per class, and how long the backlog has stood."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from policies.edge import EdgeSnapshot
from policies.priority import PRIORITIES, Priority

__all__ = ["EdgeState", "StandingBacklog"]


class StandingBacklog:
    """The fewest requests in flight over the last ``window_s`` or so (CoDel's standing queue).

    A burst that drains within the window leaves it low: a pause of the host, the loop or a
    client that let requests pile up for a moment. A queue that never drains keeps it high:
    sustained overload. Kept over fixed windows: :meth:`value` is the fewest over the current
    window and the whole one before it, so a backlog stands once it has lasted one to two
    windows. The count between two changes is the one held, so an idle stretch reads 0.
    """

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        self.window_s = window_s
        self._clock = clock
        self._start = clock()
        self._count = 0  # in flight now
        self._min = 0  # fewest in the current window
        self._prev_min = 0  # fewest in the window before it

    def update(self, count: int, now: float | None = None) -> None:
        """The number in flight has just changed to ``count`` (``now``: the caller's clock
        reading, when it has one)."""
        self._roll(self._clock() if now is None else now)
        self._count = count
        if count < self._min:
            self._min = count

    def value(self) -> int:
        """The fewest in flight over the current window and the one before it."""
        self._roll(self._clock())
        return min(self._prev_min, self._min)

    def _roll(self, now: float) -> None:
        windows = int((now - self._start) // self.window_s)
        if windows <= 0:
            return
        # the last whole window: the current one if it just ended, else one that held the count
        self._prev_min = self._min if windows == 1 else self._count
        self._start += windows * self.window_s
        self._min = self._count


class EdgeState:
    """What the edge owns: work in flight per class and the measured seconds per request.

    The service time is an EWMA of the gap between completions while the backend stays busy
    (1 / throughput under load), or of a request's own latency when it ran alone.
    """

    def __init__(self, *, initial_service_s: float, alpha: float = 0.1, rate_tau_s: float = 1.0,
                 standing_window_s: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.in_flight: dict[Priority, int] = {p: 0 for p in Priority}
        self.total = 0
        # admitted per second per class: an exponentially decayed count (time constant tau)
        self._rate: dict[Priority, tuple[float, float]] = {p: (0.0, 0.0) for p in Priority}
        self._tau = rate_tau_s
        self.service_s = initial_service_s
        self.readers = 0
        self.counts: dict[str, int] = {}
        self._alpha = alpha
        self._clock = clock
        self._last_done: float | None = None
        self.backlog = StandingBacklog(standing_window_s, clock)

    def snapshot(self) -> EdgeSnapshot:
        now = self._clock()
        return EdgeSnapshot(dict(self.in_flight), self.service_s,
                            {p: self._decayed(p, now) for p in PRIORITIES},
                            standing=self.backlog.value())

    def _decayed(self, p: Priority, now: float) -> float:
        rate, at = self._rate[p]
        return rate * math.exp(-(now - at) / self._tau) if rate else 0.0

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def started(self, priority: Priority, now: float | None = None) -> None:
        """One request admitted (``now``: the caller's clock reading, when it has one)."""
        if now is None:
            now = self._clock()
        if not self.total:
            self._last_done = None  # idle until now: the next gap is not a service time
        self.in_flight[priority] += 1
        self.total += 1
        self.backlog.update(self.total, now)
        self._rate[priority] = (self._decayed(priority, now) + 1.0 / self._tau, now)

    def finished(self, priority: Priority, started_s: float, *, used_backend: bool = True) -> None:
        """One admitted request has been answered. Only an answer the backend computed is a
        service-time sample: a cache hit, or a request the pool refused and its fallback
        answered, finishes in microseconds without using the backend, and counting those gaps
        took the service time to a fraction of the model's, so the edge let through several
        times what the backend could serve in time."""
        now = self._clock()
        self.in_flight[priority] -= 1
        self.total -= 1
        self.backlog.update(self.total, now)
        if not used_backend:
            return
        sample = now - (self._last_done if self._last_done is not None else started_s)
        self.service_s += self._alpha * (max(sample, 0.0) - self.service_s)
        self._last_done = now
