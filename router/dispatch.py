"""The seam between the router and the pools.

The Ray adapter (``router.ingress``) implements ``Dispatcher`` with deployment handles; tests and
benchmarks use ``LocalDispatcher`` over in-process ``pool.host.ModelHost`` objects.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from policies.priority import Priority
from pool.wire import PoolReply, run_work, work_request

__all__ = ["Dispatcher", "PoolDispatcher", "LocalDispatcher", "PoolReply"]


class Dispatcher(Protocol):
    pools: tuple[str, ...]  # e.g. ("gpu", "cpu") or ("cpu",)

    async def dispatch(
        self,
        pool: str,
        model: str,
        version: str,
        inputs: dict[str, np.ndarray],
        *,
        priority: Priority,
        timeout_s: float,
    ) -> PoolReply: ...


class PoolDispatcher:
    """``Dispatcher`` over pool clients keyed by pool name: anything with
    ``async infer(work_request) -> PoolReply`` (a deployment handle wrapper, a PoolService)."""

    def __init__(self, pools: dict) -> None:
        self._pools = pools
        self.pools = tuple(pools)

    async def dispatch(self, pool, model, version, inputs, *, priority, timeout_s) -> PoolReply:
        return await self._pools[pool].infer(
            work_request(model, version, inputs, priority, timeout_s))


class _HostClient:
    def __init__(self, host, pool: str) -> None:
        self._host, self._pool = host, pool

    async def infer(self, work) -> PoolReply:
        return await run_work(self._host, self._pool, work)


class LocalDispatcher(PoolDispatcher):
    """In-process dispatcher over ``pool.host.ModelHost`` objects keyed by pool name."""

    def __init__(self, hosts: dict) -> None:
        super().__init__({name: _HostClient(h, name) for name, h in hosts.items()})
