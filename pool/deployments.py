"""Ray Serve adapter for the pools: a thin class forwarding to a PoolService.

One GPU-pool replica per GPU (``num_gpus=1``); the CPU pool scales with replicas. Each replica
polls the model repository (hot reload) and publishes routing stats for the request router.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from ray import serve

from common.trust import TrustSettings
from pool.service import PoolService
from pool.work import PoolRefusal, PoolReply, PoolWork

__all__ = ["PoolDeployment", "log_pool_to_serve"]

SERVE_LOGGER = "ray.serve"  # Ray Serve's replica logger: the replica's log file (and stderr)


class _ToServeLog(logging.Handler):
    """Hands the pool's log records to Serve's replica logger, level and source kept.

    Without it a pool WARNING (a refused model) reaches only the replica's stderr, which
    Serve's throughput-optimized mode turns into INFO records held in a 1000-record buffer: no
    operator would see it. A WARNING or worse also flushes Serve's handlers, so the line is in
    the replica's log file at once (such lines are rare: one per refusal, not per poll).
    """

    def emit(self, record: logging.LogRecord) -> None:
        serve_log = logging.getLogger(SERVE_LOGGER)
        if not serve_log.isEnabledFor(record.levelno):
            return
        # Serve's own handlers only: the record already propagates from ``pool`` to the root,
        # so neither ``serve_log.handle`` (which would propagate it again where Serve has not
        # configured its logger: tests, a driver) nor a handler the root also holds (Ray's
        # driver-side setup may share them) may see it a second time.
        shared = logging.getLogger().handlers
        for handler in serve_log.handlers:
            if record.levelno >= handler.level and handler not in shared:
                handler.handle(record)
                if record.levelno >= logging.WARNING:
                    handler.flush()


def log_pool_to_serve() -> None:
    """Send the `pool` package's log records to Serve's replica log (idempotent)."""
    pool_log = logging.getLogger("pool")
    if not any(isinstance(h, _ToServeLog) for h in pool_log.handlers):
        pool_log.addHandler(_ToServeLog())  # still propagates: a root handler sees it too
        pool_log.setLevel(logging.INFO)


@serve.deployment(name="Pool", max_ongoing_requests=256)
class PoolDeployment:
    async def __init__(self, pool: str, repository: str, state_dir: str, device: dict[str, Any],  # type: ignore[misc]
                       poll_interval_s: float = 1.0, replicas: int = 1,
                       trust: TrustSettings | None = None,
                       compile_cache_dir: str | None = None) -> None:
        log_pool_to_serve()
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
