"""Shared by the pipeline tests: a real ``ModelHost`` over the demo repository on the CPU, and a
``Pipeline`` over it through a ``LocalPoolClient`` (no Ray)."""

from __future__ import annotations

import pytest

from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository

MB = 1 << 20


@pytest.fixture
async def host(demo_repo_master):
    h = ModelHost(ModelRepository(demo_repo_master),
                  DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=256 * MB)))
    await h.sync()
    assert h.index()["digits-small"].ready
    yield h
    await h.worker.close()
