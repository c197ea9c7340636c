"""How the ingress talks to a pool: through a deployment handle, or in-process."""

from __future__ import annotations

from typing import Any

from pool.service import PoolService
from pool.wire import PoolReply, unwrap

__all__ = ["RemotePool", "LocalPool"]


class RemotePool:
    """A pool deployment behind its handle (the pools' request router picks the replica)."""

    def __init__(self, handle) -> None:
        self._h = handle

    async def infer(self, work: dict[str, Any]) -> PoolReply:
        return unwrap(await self._h.infer.remote(work))

    async def index(self):
        return await self._h.index.remote()

    async def status(self) -> dict:
        return await self._h.status.remote()

    async def routing_stats(self):
        return await self._h.routing_stats.remote()

    async def sync(self) -> None:
        await self._h.sync_now.remote()


class LocalPool:
    """A PoolService owned by this process: no network hop (``cpu_pool.placement: ingress``)."""

    def __init__(self, service: PoolService) -> None:
        self.service = service

    async def infer(self, work: dict[str, Any]) -> PoolReply:
        return await self.service.infer(work)

    async def index(self):
        return self.service.index()

    async def status(self) -> dict:
        return self.service.status()

    async def routing_stats(self):
        return self.service.routing_stats()

    async def sync(self) -> None:
        await self.service.sync()
