"""Shared by the pipeline tests: a real ``ModelHost`` over the demo repository on the CPU, and a
``Pipeline`` over it through a ``LocalPoolClient`` (no Ray)."""

from __future__ import annotations

import asyncio
import time

import pytest

from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository
from tests.support.demo import SMALL_DEMO

MB = 1 << 20


@pytest.fixture
async def host(demo_repo_master):
    """Every demo model ready: a repository built just now (this file run alone) settles first
    (``ModelRepository.settle_s``), so it is synced until all are, for at most 30 s."""
    h = ModelHost(ModelRepository(demo_repo_master),
                  DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=256 * MB)))
    deadline = time.monotonic() + 30
    await h.sync()
    while not all(m in h.index() and h.index()[m].ready for m in SMALL_DEMO):
        assert time.monotonic() < deadline, f"demo models not ready in 30 s: {h.index()}"
        await asyncio.sleep(0.1)
        await h.sync()
    yield h
    await h.worker.close()
