"""Client-side adaptive throttling toward a failing pool (SRE book, "Handling Overload")."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from common.clock import Clock
from fallbacks._private.windows import TimeBuckets
from policies.admission import throttle_reject_probability

__all__ = ["AdaptiveThrottle"]


class AdaptiveThrottle:
    """Rejects locally with probability ``max(0, (requests - k*accepts) / (requests + 1))``.

    Counts cover the last ``window_s`` seconds (bounded: one bucket per second). Usage::

        if not throttle.allow():
            ...  # skip the pool: reason "throttled"
        ok = await call()
        throttle.on_accepted() if ok else throttle.on_rejected()
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
        """Decide whether to send an attempt; one rejected here counts as a request at once.

        An attempt let through is counted when its outcome is known (:meth:`on_accepted` /
        :meth:`on_rejected`): counted at send time, a burst of calls still in flight would
        look like a backend accepting nothing and throttle a healthy pool at start-up.
        """
        p = self.reject_probability()
        if p <= 0.0 or self._rng() >= p:
            return True
        self._counts.add(self._clock(), 1, 0)
        return False

    def on_accepted(self) -> None:
        """The backend accepted (answered) a request that :meth:`allow` let through."""
        self._counts.add(self._clock(), 1, 1)

    def on_rejected(self) -> None:
        """The backend refused, failed or timed out a request that :meth:`allow` let through."""
        self._counts.add(self._clock(), 1, 0)
