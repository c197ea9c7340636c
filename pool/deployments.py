"""Ray Serve adapters for the pools: a thin class owning a ModelHost over one DeviceWorker.

One GPU-pool replica per GPU (``num_gpus=1``); the CPU pool scales with replicas. Each replica
polls the model repository (hot reload) and publishes routing stats for the request router.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psutil
import torch
from ray import serve

from pool._private.worker import DeviceWorker
from pool.control import ControlFile
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository
from pool.wire import run_work

__all__ = ["PoolDeployment", "cpu_threads_per_replica"]

log = logging.getLogger("ray.serve")


def cpu_threads_per_replica(replicas: int) -> int:
    """Physical cores / replicas (at least one), so replicas don't oversubscribe the CPU."""
    cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    return max(1, cores // max(1, replicas))


@serve.deployment(name="Pool", max_ongoing_requests=256)
class PoolDeployment:
    async def __init__(
        self,
        pool: str,
        repository: str,
        state_dir: str,
        device: dict[str, Any],
        poll_interval_s: float = 1.0,
        replicas: int = 1,
    ) -> None:
        self.pool = pool
        spec = DeviceSpec(**device)
        if spec.kind == "cpu":
            torch.set_num_threads(spec.threads or cpu_threads_per_replica(replicas))
        accepts = (lambda c: c.device != "cpu") if pool == "gpu" else (lambda c: True)
        self.host = ModelHost(ModelRepository(repository), DeviceWorker(spec), device_filter=accepts)
        self.control = ControlFile(state_dir)
        self._poll_s = poll_interval_s
        await self._sync()
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _sync(self) -> None:
        self.host.set_unloaded(self.control.unloaded())
        await self.host.sync()

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self._sync()
            except Exception:  # the poller must outlive any one bad pass
                log.exception("repository sync failed")

    async def infer(self, work: dict[str, Any]):
        return await run_work(self.host, self.pool, work)

    async def index(self):
        return self.host.index()

    async def sync_now(self) -> None:
        await self._sync()

    async def status(self) -> dict:
        return {"pool": self.pool, **self.host.status()}

    async def routing_stats(self):
        """This replica's RoutingStats (the router's load view for admission and spill)."""
        return self.host.worker.routing_stats()

    def record_routing_stats(self) -> dict[str, Any]:
        """Published to Ray Serve's request router (pool.request_router)."""
        return self.host.worker.routing_stats().to_dict()
