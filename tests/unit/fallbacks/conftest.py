"""Shared fakes for the fallbacks unit tests."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.clocks import FakeClock


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
