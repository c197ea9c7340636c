"""Client-side adaptive throttling toward a failing pool (SRE book, "Handling Overload")."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from fallbacks._private.windows import TimeBuckets
from fallbacks.deadline import Clock
from policies.admission import throttle_reject_probability

__all__ = ["AdaptiveThrottle"]


class AdaptiveThrottle:
    """Rejects locally with probability ``max(0, (requests - k*accepts) / (requests + 1))``.

    Counts cover the last ``window_s`` seconds (bounded: one bucket per second). Usage::

        if not throttle.allow():
            ...  # skip the pool: reason "throttled"
        ok = await call()
        if ok:
            throttle.on_accepted()
    """

    def __init__(
        self,
        *,
        k: float = 2.0,
        window_s: float = 120.0,
        clock: Clock = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if k <= 0:
            raise ValueError(f"k must be > 0, got {k}")
        self.k = k
        self._clock = clock
        self._rng = rng
        self._counts = TimeBuckets(window_s, 2)  # requests, accepts

    def reject_probability(self) -> float:
        """Current local rejection probability."""
        requests, accepts = self._counts.totals(self._clock())
        return throttle_reject_probability(requests, accepts, self.k)

    def allow(self) -> bool:
        """Count an attempt and decide whether to send it."""
        p = self.reject_probability()
        self._counts.add(self._clock(), 1, 0)
        return p <= 0.0 or self._rng() >= p

    def on_accepted(self) -> None:
        """The backend accepted (answered) a request that :meth:`allow` let through."""
        self._counts.add(self._clock(), 0, 1)
