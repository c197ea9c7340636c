"""Shared fakes for the fallbacks unit tests."""

from __future__ import annotations

import pytest


class FakeClock:
    """A monotonic clock that only moves when told to (implements ``fallbacks.Clock``)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
