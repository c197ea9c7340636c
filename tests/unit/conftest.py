"""Fixtures shared by the unit tests of more than one folder."""

from __future__ import annotations

import sys

import pytest

CANARY_MODULE = "tests.unit.security.canary_import"  # writes $TIMESHARE_CANARY when imported


@pytest.fixture
def canary(tmp_path, monkeypatch):
    """The path a refused module would create if it were imported; checked at teardown."""
    path = tmp_path / "canary"
    monkeypatch.setenv("TIMESHARE_CANARY", str(path))
    sys.modules.pop(CANARY_MODULE, None)
    yield path
    assert not path.exists(), "a refused module was imported: its top-level code ran"
    assert CANARY_MODULE not in sys.modules
