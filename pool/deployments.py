"""Ray Serve adapter for the pools: a thin class forwarding to a PoolService.

One GPU-pool replica per GPU (``num_gpus=1``); the CPU pool scales with replicas. Each replica
polls the model repository (hot reload) and publishes routing stats for the request router.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ray import serve

from common.trust import TrustSettings
from pool.service import PoolService
from pool.work import PoolRefusal, PoolReply, PoolWork

__all__ = ["PoolDeployment"]


@serve.deployment(name="Pool", max_ongoing_requests=256)
class PoolDeployment:
    async def __init__(self, pool: str, repository: str, state_dir: str, device: dict[str, Any],  # type: ignore[misc]
                       poll_interval_s: float = 1.0, replicas: int = 1,
                       trust: TrustSettings | None = None,
                       compile_cache_dir: str | None = None) -> None:
        self.service = PoolService(pool, repository, state_dir, device,
                                   poll_interval_s=poll_interval_s, replicas=replicas,
                                   trust=trust, compile_cache_dir=compile_cache_dir)
        await self.service.start()
        # Ray Serve gives a replacement replica the rank of the one it replaces: the ingress
        # counts a new incarnation in a known rank as a restart (the replica_restarts rule).
        self._slot = serve.get_replica_context().rank.rank

    async def infer(self, work: PoolWork) -> PoolReply | PoolRefusal:
        """A ``PoolReply``, or a ``PoolRefusal`` (callers: ``pool.work.unwrap``)."""
        return await self.service.run_or_refusal(work)

    async def index(self):
        return self.service.index()

    async def sync_now(self) -> None:
        await self.service.sync()

    async def status(self) -> dict:
        return self.service.status()

    async def routing_stats(self):
        """This replica's RoutingStats (the router's load view for admission and spill)."""
        return dataclasses.replace(self.service.routing_stats(), published_at=time.time())

    async def counters(self):
        """This replica's DeviceCounters (exported by the ingress, fed to the alert rules)."""
        return dataclasses.replace(self.service.counters(), slot=self._slot)

    async def __del__(self) -> None:
        """Serve awaits this on replica shutdown: stop polling, close the device worker."""
        service = getattr(self, "service", None)  # None when __init__ failed
        if service is not None:
            await service.close()

    def record_routing_stats(self) -> dict[str, Any]:
        """Published to Ray Serve's request router (pool.request_router)."""
        return dataclasses.replace(self.service.routing_stats(),
                                   published_at=time.time()).to_dict()
