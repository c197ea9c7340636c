"""Shared by the pipeline tests: a real ``ModelHost`` over the demo repository on the CPU, and a
``Pipeline`` over it through a ``LocalPoolClient`` (no Ray)."""

from __future__ import annotations

import pytest

from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository
from router.catalog import ModelCatalog
from router.pipeline import Pipeline
from router.pool_client import LocalPoolClient

MB = 1 << 20


@pytest.fixture
async def host(demo_repo_master):
    h = ModelHost(ModelRepository(demo_repo_master),
                  DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=256 * MB)))
    await h.sync()
    assert h.index()["digits-small"].ready
    yield h
    await h.worker.close()


def local_pipeline(host: ModelHost, **kw) -> Pipeline:
    """A pipeline whose only pool is ``host``, in process."""

    async def fetch():
        return host.index()

    return Pipeline(ModelCatalog(fetch), {"cpu": LocalPoolClient(host)}, **kw)
