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

Convention for finding the model of a request (first that applies):

1. keyword arguments ``model`` (and optional ``version``, ``priority``);
2. the first positional argument, when it is a dict with a ``model`` key (same optional keys);
3. the first positional argument, when it has ``model`` / ``version`` / ``priority`` attributes
   (e.g. a pydantic ``InferenceRequest``).

A request with no model is ranked by wait only. Ranking itself is the pure
``policies.replica_ranking.rank_replicas``.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from policies.priority import Priority, parse_priority
from policies.replica_ranking import ReplicaView, RouteTarget, rank_replicas

__all__ = ["TimeshareRequestRouter", "route_target", "replica_view"]


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def route_target(pending_request: PendingRequest | None) -> RouteTarget:
    """The model/version/priority a pending request asks for (see the module docstring)."""
    if pending_request is None:
        return RouteTarget(None)
    source: Any = None
    if "model" in (pending_request.kwargs or {}):
        source = pending_request.kwargs
    elif pending_request.args:
        first = pending_request.args[0]
        if _field(first, "model") is not None:
            source = first
    if source is None:
        return RouteTarget(None)
    version = _field(source, "version")
    try:
        priority = parse_priority(_field(source, "priority"))
    except ValueError:
        priority = Priority.default()  # the replica rejects it with a clear error
    return RouteTarget(str(_field(source, "model")), None if version is None else str(version),
                       priority)


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


class TimeshareRequestRouter(RequestRouter):
    """Ranks replicas: model resident first, then in host tier, then shortest estimated wait."""

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        views = [replica_view(rid, r.routing_stats) for rid, r in by_id.items()]
        ranks = rank_replicas(views, route_target(pending_request))
        return [[by_id[rid] for rid in rank] for rank in ranks]
