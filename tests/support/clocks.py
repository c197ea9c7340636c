"""Clocks for tests: the one settable clock is ``common.clock.FakeClock``; ``TickingClock``
is one that also moves by a fixed tick at each read, for code that polls a clock until a time
comes (a busy wait on a clock that never moves would never end)."""

from __future__ import annotations

from common.clock import FakeClock

__all__ = ["FakeClock", "TickingClock"]


class TickingClock(FakeClock):
    """A ``FakeClock`` that moves forward ``tick`` seconds at every read.

    >>> c = TickingClock(0.0, tick=0.5); c(), c()
    (0.5, 1.0)
    """

    def __init__(self, start: float = 1000.0, *, tick: float = 1e-5) -> None:
        super().__init__(start)
        self.tick = tick

    def __call__(self) -> float:
        return self.advance(self.tick)
