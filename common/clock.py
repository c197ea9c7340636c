"""The one clock type: a zero-argument callable returning seconds, injected everywhere.

Production passes ``time.monotonic`` (deadlines, breakers, caches) or ``time.time`` (alerting,
which stamps alerts in epoch seconds); tests pass a :class:`FakeClock`.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Clock", "FakeClock"]

Clock = Callable[[], float]
"""Seconds on some fixed origin (``time.monotonic``, ``time.time``, or a fake)."""


class FakeClock:
    """A clock that only moves when told to; call it for the time.

    >>> c = FakeClock(100.0)
    >>> c.advance(30)
    130.0
    >>> c()
    130.0
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never backwards) and return the new time."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self._now += float(seconds)
        return self._now

    def set(self, at: float) -> None:
        """Jump to ``at`` (not earlier than now)."""
        if at < self._now:
            raise ValueError(f"cannot move the clock back from {self._now} to {at}")
        self._now = float(at)
