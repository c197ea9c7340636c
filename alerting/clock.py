"""Injectable clocks: wall time in epoch seconds.

Everything time-dependent in ``alerting`` takes a :class:`Clock` so tests drive it exactly.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock time, in seconds since the epoch."""

    def now(self) -> float:
        """Current time in epoch seconds."""
        ...


class SystemClock:
    """The real clock (``time.time``)."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that only moves when told to.

    >>> c = FakeClock(100.0); c.advance(30); c.now()
    130.0
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never backwards) and return the new time."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self._now += float(seconds)
        return self._now

    def set(self, at: float) -> None:
        """Jump to ``at`` (must not be earlier than now)."""
        if at < self._now:
            raise ValueError(f"cannot move the clock back from {self._now} to {at}")
        self._now = float(at)
