"""Ray Serve request router for the pool deployments: model resident first, shortest wait next.

Use it on a pool deployment that publishes :meth:`RoutingStats.to_dict` from its
``record_routing_stats()`` method::

    from ray.serve.config import RequestRouterConfig

    @serve.deployment(request_router_config=RequestRouterConfig(
        request_router_class="pool.request_router:TimeshareRequestRouter",
        request_routing_stats_period_s=0.5))
    class GpuPool:
        def record_routing_stats(self) -> dict:
            return self.worker.routing_stats().to_dict()

The request's model, version and class are read from the call's typed ``RequestMetadata``, never
from its arguments: the caller sets ``multiplexed_model_id`` to the work's
``pool.work.routing_id`` (``handle.options(multiplexed_model_id=...)``, as
``router.pool_client.RemotePoolClient`` does). A call without one (``status``, ``index``...) is
ranked by wait only. Ranking itself is the pure ``policies.replica_ranking.rank_replicas``.

Ray Serve 2.60 indexes every pending request that has a ``multiplexed_model_id`` by that id and
prunes the index only in ``MultiplexMixin``'s lookup, which ``FIFOMixin`` calls when it hands a
chosen replica to a request; a router without both keeps every such request forever. So this
router mixes both in, as Ray's own routers do: a replica chosen for a request goes to the oldest
pending request with the same id (same model, version and class), the request itself at the
latest.

Placement (``policies.placement``): the router counts the requests it routes per model
(``ArrivalRates``, a sliding window) and reads the per-model compute the replicas publish; the
model's target replica set is ranked first. Ray passes ``request_router_kwargs`` to
``initialize_state``: ``placement`` (default True; False ranks as without a plan),
``capacity_share``, ``default_compute_s``, ``rate_window_s``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from ray.serve.request_router import (
    FIFOMixin,
    MultiplexMixin,
    PendingRequest,
    RequestRouter,
    RunningReplica,
)

from policies.placement import ModelLoad, PlacementConfig, ReplicaSlot, target_set
from policies.replica_ranking import ReplicaView, RouteTarget, rank_replicas
from pool._private.routers import live, register
from pool.types import RoutingStats
from pool.work import route_target_of

__all__ = ["ArrivalRates", "TimeshareRequestRouter", "published_stats", "route_target",
           "replica_view"]


def route_target(pending_request: PendingRequest | None) -> RouteTarget:
    """The model/version/priority of a pending call, from its metadata's
    ``multiplexed_model_id`` (``pool.work.routing_id``); empty for a call without one."""
    if pending_request is None or pending_request.metadata is None:
        return RouteTarget(None)
    return route_target_of(pending_request.metadata.multiplexed_model_id)


def replica_view(replica_id: str, stats: dict[str, Any] | None) -> ReplicaView:
    """A ranking view of one replica's published routing stats (empty stats: unknown)."""
    if not stats or "queue_delay_s" not in stats:
        return ReplicaView(replica_id)
    return ReplicaView(
        replica_id,
        frozenset(stats.get("resident", ())),
        frozenset(stats.get("hosted", ())),
        tuple(float(x) for x in stats["queue_delay_s"]),
        int(stats.get("memory_free_bytes", 0)),
    )


def _name(key: str) -> str:
    return key.split("@", 1)[0]


class ArrivalRates:
    """Requests per second per model over the last ``window_s`` (this router's own traffic).

    Bounded: one timestamp per request within the window per model, models without a request
    in the window dropped."""

    def __init__(self, window_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"rate_window_s must be > 0, got {window_s!r}")
        self.window_s, self._clock = window_s, clock
        self._seen: dict[str, deque[float]] = {}

    def record(self, model: str) -> None:
        self._seen.setdefault(model, deque()).append(self._clock())

    def rate(self, model: str) -> float:
        q = self._seen.get(model)
        if not q:
            return 0.0
        cutoff = self._clock() - self.window_s
        while q and q[0] < cutoff:
            q.popleft()
        if not q:
            del self._seen[model]
        return len(q) / self.window_s


def model_load(model: str, rate: float, views: Sequence[tuple[str, dict[str, Any] | None]]
               ) -> ModelLoad:
    """The model's rate with the largest per-row compute any replica measured (None: none)."""
    costs = [float(c) for _, stats in views if stats
             for key, c in (stats.get("row_cost_s") or {}).items() if _name(key) == model]
    return ModelLoad(rate, max(costs) if costs else None)


def replica_slots(views: Sequence[tuple[str, dict[str, Any] | None]]) -> list[ReplicaSlot]:
    """Placement's view of the replicas that reported stats (model names resident on each, and
    in each host tier)."""
    return [ReplicaSlot(rid, frozenset(_name(k) for k in stats.get("resident", ())),
                        frozenset(_name(k) for k in stats.get("hosted", ())))
            for rid, stats in views if stats and "queue_delay_s" in stats]


class TimeshareRequestRouter(FIFOMixin, MultiplexMixin, RequestRouter):
    """Ranks replicas: the model's placement target set first; then resident, then in host
    tier, then shortest estimated wait."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.placement = True
        self.placement_config = PlacementConfig()
        self.rates = ArrivalRates()
        # Ray calls choose_replicas again for the same request while it backs off; count each
        # request once. Bounded: the last 4096 request ids.
        self._counted: deque[object] = deque(maxlen=4096)
        self._counted_set: set[object] = set()
        register(self)  # so published_stats finds it (pool._private.routers says why there)

    def initialize_state(self, placement: bool = True, capacity_share: float = 0.5,
                         default_compute_s: float = 0.01, rate_window_s: float = 5.0,
                         **kwargs: Any) -> None:
        """Ray calls this with ``request_router_kwargs`` (also with none: the defaults)."""
        if kwargs:
            raise ValueError(f"unknown request_router_kwargs {sorted(kwargs)}; valid: placement, "
                             "capacity_share, default_compute_s, rate_window_s")
        self.placement = bool(placement)
        self.placement_config = PlacementConfig(capacity_share, default_compute_s)
        self.rates = ArrivalRates(rate_window_s)

    def _count(self, pending_request: PendingRequest | None, target: RouteTarget) -> None:
        if pending_request is None or target.model is None:
            return
        # Ray's proxy and handles always set the id; a request without one is counted per call.
        rid = getattr(pending_request.metadata, "internal_request_id", None)
        if rid is None:
            self.rates.record(target.model)
            return
        if rid in self._counted_set:
            return
        if len(self._counted) == self._counted.maxlen:
            self._counted_set.discard(self._counted[0])
        self._counted.append(rid)
        self._counted_set.add(rid)
        self.rates.record(target.model)

    def placed_on(self, target: RouteTarget, views: Sequence[tuple[str, dict[str, Any] | None]]
                  ) -> frozenset[str] | None:
        """The target replica set of this request's model (None: no plan for it)."""
        if not self.placement or target.model is None:
            return None
        slots = replica_slots(views)
        if not slots:
            return None
        load = model_load(target.model, self.rates.rate(target.model), views)
        return target_set(target.model, load, slots, self.placement_config)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        stats = [(rid, r.routing_stats) for rid, r in by_id.items()]
        target = route_target(pending_request)
        self._count(pending_request, target)
        views = [replica_view(rid, s) for rid, s in stats]
        ranks = rank_replicas(views, target, self.placed_on(target, stats))
        return [[by_id[rid] for rid in rank] for rank in ranks]


def published_stats(app_name: str, deployment_name: str) -> list[RoutingStats]:
    """Every replica's latest published stats held by this process's routers for the
    deployment (Ray's controller fetches them from each replica and broadcasts them to every
    router, so every ingress replica reads the same). Empty when no such router runs here."""
    by_replica: dict[str, RoutingStats] = {}
    for router in live():
        dep = getattr(router, "_deployment_id", None)  # set by Ray's RequestRouter.__init__
        if dep is None or (dep.app_name, dep.name) != (app_name, deployment_name):
            continue
        for rid, replica in router.curr_replicas.items():
            stats = replica.routing_stats
            if stats and "queue_delay_s" in stats:
                by_replica[rid.unique_id] = RoutingStats.from_dict(stats)
    return list(by_replica.values())
