"""Shared fakes for the fallbacks unit tests."""

from __future__ import annotations

import asyncio

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


@pytest.fixture(autouse=True)
async def no_leaked_tasks():
    """Every test must finish or cancel the tasks it started (hung calls included)."""
    yield
    await asyncio.sleep(0)  # let cancellations that were just requested run
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert not pending, f"leaked tasks: {pending}"
