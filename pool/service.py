"""PoolService: one pool replica's work, Ray-free.

Owns a ModelHost over one DeviceWorker, keeps it in step with the repository (poll + the
explicit load/unload control file) and answers work requests. ``PoolDeployment`` is a thin Ray
adapter over it; the ingress can also own one in-process (``cpu_pool.placement: ingress``) to save
a network hop for CPU-served models.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import torch

from common.trust import TrustSettings
from pool._private.compile_cache import configure_compile_cache
from pool._private.cpu_affinity import CpuPinning, pin_replica
from pool._private.worker import DeviceWorker, RoutingStats
from pool.control import ControlFile
from pool.device import DeviceSpec
from pool.host import ModelHost, ModelIndexEntry
from pool.repository import ModelRepository
from pool.types import DeviceCounters
from pool.work import PoolRefusal, PoolReply, PoolWork

__all__ = ["PoolService", "cpu_threads_per_replica"]

log = logging.getLogger(__name__)


CLOSE_WAIT_S = 10.0  # close() waits this long for the poller's sync in flight


def cpu_threads_per_replica(replicas: int) -> int:
    """Usable cores / replicas (at least one), so replicas don't oversubscribe the CPU.

    (``os`` only: psutil is not a dependency, and Ray 2.60 no longer installs it.)"""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)
    return max(1, cores // max(1, replicas))


class PoolService:
    def __init__(self, pool: str, repository: str, state_dir: str, device: dict[str, Any], *,
                 poll_interval_s: float = 1.0, replicas: int = 1,
                 trust: TrustSettings | None = None,
                 compile_cache_dir: str | None = None) -> None:
        self.pool = pool
        spec = DeviceSpec(**device)
        # torch.compile'd models: one kernel cache per machine, kept across restarts.
        configure_compile_cache(compile_cache_dir or os.path.join(state_dir, "inductor"))
        self.pinning: CpuPinning | None = None
        if spec.kind == "cpu":
            self.pinning = pin_replica(state_dir, replicas, mode=spec.pin_cores)
            pinned = len(self.pinning.cpus) if self.pinning else None
            torch.set_num_threads(spec.threads or pinned or cpu_threads_per_replica(replicas))
        accepts = (lambda c: c.device != "cpu") if pool == "gpu" else (lambda c: True)
        self.host = ModelHost(ModelRepository(repository, trust=trust or TrustSettings()),
                              DeviceWorker(spec), device_filter=accepts)
        self.control = ControlFile(state_dir)
        self._poll_s = poll_interval_s
        self._poller: asyncio.Task | None = None
        self._closing = False  # stops the poller even if a cancel is swallowed under sync()

    async def start(self) -> None:
        """Load the repository once, then keep polling it in the background."""
        await self.sync()
        self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def sync(self) -> None:
        self.host.set_unloaded(self.control.unloaded())
        await self.host.sync()

    async def _poll(self) -> None:
        while not self._closing:
            await asyncio.sleep(self._poll_s)
            try:
                await self.sync()
            except Exception:  # the poller must outlive any one bad pass
                log.exception("repository sync failed")

    async def run(self, work: PoolWork) -> PoolReply:
        """Run ``work``; raises RequestExpired, DeviceOutOfMemory, ModelNotLoaded, QueueFull."""
        return await self.host.run(work)

    async def run_or_refusal(self, work: PoolWork) -> PoolReply | PoolRefusal:
        """:meth:`run` with the expected refusals returned as values (across a handle)."""
        try:
            return await self.host.run(work)
        except Exception as e:
            refusal = PoolRefusal.of(e)
            if refusal is None:
                raise
            return refusal

    def index(self) -> dict[str, ModelIndexEntry]:
        return self.host.index()

    def status(self) -> dict:
        pinned = sorted(self.pinning.cpus) if self.pinning else None
        return {"pool": self.pool, "pinned_cpus": pinned, **self.host.status()}

    def routing_stats(self) -> RoutingStats:
        return self.host.worker.routing_stats()

    def counters(self) -> DeviceCounters:
        """This replica's device counters and gauges (metrics, alert inputs)."""
        return self.host.worker.counters()

    async def close(self) -> None:
        """Stop polling (waiting for a sync in flight, at most ``CLOSE_WAIT_S``), then close the
        worker: a sync still running would otherwise load into a closed worker."""
        self._closing = True
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.wait({self._poller}, timeout=CLOSE_WAIT_S)
        await self.host.worker.close()
        if self.pinning is not None:
            self.pinning.release()
