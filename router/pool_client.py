"""How the router calls a pool: one ``PoolClient`` protocol, remote (Ray handle) or in-process.

The pipeline builds one :class:`pool.work.PoolWork` per model call and hands it to a client; the
client returns the pool's :class:`pool.work.PoolReply` (timings included) or raises the pool's
refusal as its exception. :class:`PoolExecutor` is the fallback chain's ``ModelExecutor`` over
these clients: the primary call runs the request's own work as is (resolved and validated once
by the pipeline); a fallback to another model resolves and validates for that model.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from fallbacks import FallbackRequest, RetryBudget
from fallbacks.deadline import Deadline
from fallbacks.retry import retry_failed
from pool.host import ModelHost, ModelIndexEntry
from pool.service import PoolService
from pool.types import DeviceCounters, RoutingStats
from pool.work import PoolReply, PoolWork, unwrap
from router.catalog import ModelCatalog, config_of
from router.errors import TimeshareError
from router.validation import validate_inputs

__all__ = ["LocalPoolClient", "PoolClient", "PoolExecutor", "RemotePoolClient", "RoutedRequest"]


class PoolClient(Protocol):
    """One pool as the router sees it."""

    async def run(self, work: PoolWork) -> PoolReply:
        """Run ``work``; raises RequestExpired, DeviceOutOfMemory, ModelNotLoaded, QueueFull."""
        ...

    async def index(self) -> dict[str, ModelIndexEntry]: ...

    async def status(self) -> dict: ...

    async def routing_stats(self) -> RoutingStats: ...

    def replica_stats(self) -> list[RoutingStats]:
        """Every replica's latest published stats as this process already holds them (no call;
        empty when it holds none)."""
        ...

    async def counters(self) -> DeviceCounters:
        """One replica's device counters and gauges (metrics and alert inputs)."""
        ...

    async def sync(self) -> None: ...


class RemotePoolClient:
    """A pool deployment behind its handle (the pools' request router picks the replica).

    Each call carries its work's ``pool.work.routing_id`` as Ray's ``multiplexed_model_id``,
    the typed metadata the request router reads (``pool.request_router``). ``published_stats``
    is ``pool.request_router.published_stats``, passed in by the ingress so that this module
    does not load Ray Serve (the pipeline and in-process pools run without it).
    """

    # One handle per routing id (model, version, class): ``options()`` builds a new handle, so
    # it is not called per request. Bounded: rebuilt from empty past this many ids (versions
    # come and go with hot reloads).
    MAX_ROUTES = 4096

    def __init__(self, handle: Any,
                 published_stats: Callable[[str, str], list[RoutingStats]]) -> None:
        self._h = handle
        self._infer = handle.infer  # bound once: attribute lookup on a handle builds a new one
        self._routes: dict[str, Any] = {}
        self._published = published_stats

    def _call(self, routing_id: str) -> Any:
        call = self._routes.get(routing_id)
        if call is None:
            if len(self._routes) >= self.MAX_ROUTES:
                self._routes = {}
            call = self._routes[routing_id] = self._infer.options(multiplexed_model_id=routing_id)
        return call

    async def run(self, work: PoolWork) -> PoolReply:
        response = self._call(work.routing_id).remote(work)
        try:
            return unwrap(await response)
        except asyncio.CancelledError:
            # The caller went away (a gRPC client cancelled): awaiting a Serve response does
            # not cancel the call, so cancel it, and the pool drops the queued work.
            response.cancel()
            raise

    async def index(self) -> dict[str, ModelIndexEntry]:
        return await self._h.index.remote()

    async def status(self) -> dict:
        return await self._h.status.remote()

    async def routing_stats(self) -> RoutingStats:
        return await self._h.routing_stats.remote()

    def replica_stats(self) -> list[RoutingStats]:
        # The pools' request router in this process holds every replica's stats (Ray's
        # controller broadcasts them); a handle routed by Ray's default router has none.
        app = getattr(self._h, "app_name", None)
        name = getattr(self._h, "deployment_name", None)
        return self._published(app, name) if app is not None and name is not None else []

    async def counters(self) -> DeviceCounters:
        return await self._h.counters.remote()

    async def sync(self) -> None:
        await self._h.sync_now.remote()


class LocalPoolClient:
    """A pool in this process: a ``PoolService`` (``cpu_pool.placement: ingress``), or a bare
    ``ModelHost`` (tests and benchmarks) whose owner keeps it in step with the repository."""

    def __init__(self, target: PoolService | ModelHost, name: str = "cpu") -> None:
        self.service = target if isinstance(target, PoolService) else None
        self.host = target.host if isinstance(target, PoolService) else target
        self.name = name

    async def run(self, work: PoolWork) -> PoolReply:
        return await self.host.run(work)

    async def index(self) -> dict[str, ModelIndexEntry]:
        return self.host.index()

    async def status(self) -> dict:
        return {"pool": self.name, **self.host.status()}

    async def routing_stats(self) -> RoutingStats:
        return self.live_stats()

    def live_stats(self) -> RoutingStats:
        """:meth:`routing_stats` without a turn of the loop: the worker's queues as they are
        (on the loop that runs the worker)."""
        return self.host.worker.routing_stats()

    def replica_stats(self) -> list[RoutingStats]:
        return []  # one replica, in this process: routing_stats() is all of it

    async def counters(self) -> DeviceCounters:
        return self.host.worker.counters()

    async def sync(self) -> None:
        if self.service is not None:
            await self.service.sync()
        else:
            await self.host.sync()


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class RoutedRequest(FallbackRequest):
    """What the chain runner carries for a routed request: the fallback view (inputs, text,
    caller) plus the primary call's resolved, validated ``work``."""

    work: PoolWork = field(kw_only=True)


class PoolExecutor:
    """Calls pools for the chain runner. A lost replica or transport error (idempotent: the
    model did not answer) is retried within the hop's budget, bounded by ``retry_budget``
    (retries at most ``ratio`` of requests); timeouts and model errors are not retried."""

    def __init__(self, catalog: ModelCatalog, pools: Mapping[str, PoolClient], *,
                 retry_budget: RetryBudget | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._catalog = catalog
        self._pools = pools
        self._retry = retry_budget or RetryBudget(ratio=0.1, max_tokens=10)
        self._clock = clock
        self._wall = wall

    async def call_model(self, request: FallbackRequest, *, model: str, version: str | None,
                         pool: str, budget_s: float) -> PoolReply:
        assert isinstance(request, RoutedRequest), "the pipeline sends RoutedRequest"
        work = request.work
        if model != work.model or version not in (None, work.version):
            work = await self._work_for(request, model, version)  # a fallback model's own work
        client = self._pools.get(pool) or self._pools["cpu"]
        started = self._clock()
        hop = work.for_hop(self._wall() + budget_s)
        self._retry.on_request()
        try:  # the first attempt inline: retry_call's machinery only once it failed
            reply = await client.run(hop)
        except BaseException as e:
            reply = await retry_failed(
                e, lambda: client.run(hop), deadline=Deadline(at=started + budget_s,
                                                              clock=self._clock),
                budget=self._retry, retries=1)
        return reply  # the pool's reply as it came: the chain reads it as a ModelAnswer

    async def _work_for(self, request: RoutedRequest, model: str,
                        version: str | None) -> PoolWork:
        """The work for a fallback model step naming another model than the primary's (the
        primary's own work, resolved and validated once, is used as it is)."""
        work = request.work
        entry, version = await self._catalog.resolve(model, version)
        try:  # a fallback model's schema is config, not caller input: a mismatch is a failure
            inputs = validate_inputs(config_of(entry), dict(request.inputs))
        except TimeshareError as e:
            raise RuntimeError(f"fallback model {model!r} cannot take these inputs: {e}") from e
        return dataclasses.replace(work, model=model, version=version, inputs=inputs,
                                   config=config_of(entry))
