"""Fakes for the cache unit tests (they implement the real interfaces)."""

from __future__ import annotations

import pytest

from tests.support.clocks import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
