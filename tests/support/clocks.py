"""Clocks for tests: the one settable clock is ``fallbacks.clock.FakeClock``."""

from __future__ import annotations

from fallbacks.clock import FakeClock

__all__ = ["FakeClock"]
