"""Alerting's clocks: the one :data:`common.clock.Clock` type, on wall time (epoch seconds).

Everything time-dependent in ``alerting`` takes a clock so tests drive it exactly.
"""

from __future__ import annotations

import time

from common.clock import Clock, FakeClock

__all__ = ["Clock", "FakeClock", "SystemClock"]

SystemClock: Clock = time.time
"""The real clock of alerting: epoch seconds."""
