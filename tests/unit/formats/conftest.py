"""One real export per format, written once for the formats tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.formats import ALL_FORMATS, small_cnn, write_config, write_version


@pytest.fixture(scope="session")
def exported_master(tmp_path_factory) -> Path:
    """``<root>/<fmt>/1`` and ``/2`` for every format: seeds 1 and 2 of the same small CNN."""
    root = tmp_path_factory.mktemp("formats") / "repo"
    for fmt in ALL_FORMATS:
        write_config(root / fmt, fmt)
        for version in (1, 2):
            write_version(root / fmt / str(version), fmt, small_cnn(version))
    return root


@pytest.fixture
def exported(exported_master, tmp_path) -> Path:
    dst = tmp_path / "repo"
    shutil.copytree(exported_master, dst)
    return dst
