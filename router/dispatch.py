"""The seam between the router and the pools.

The Ray adapter (``router.ingress``) implements ``Dispatcher`` with deployment handles; tests and
benchmarks use ``LocalDispatcher`` over in-process ``pool.host.ModelHost`` objects.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from policies.priority import Priority
from pool.wire import PoolReply, run_work, work_request

__all__ = ["Dispatcher", "LocalDispatcher", "PoolReply"]


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


class LocalDispatcher:
    """In-process dispatcher over ModelHosts keyed by pool name."""

    def __init__(self, hosts: dict) -> None:
        self._hosts = hosts
        self.pools = tuple(hosts)

    async def dispatch(self, pool, model, version, inputs, *, priority, timeout_s) -> PoolReply:
        return await run_work(self._hosts[pool], pool,
                              work_request(model, version, inputs, priority, timeout_s))
