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

The request's model, version and class are read from the typed ``pool.work.PoolWork`` the
router sends as the only argument of ``infer``; any other call (``status``, ``index``...) is
ranked by wait only. Ranking itself is the pure ``policies.replica_ranking.rank_replicas``.
"""

from __future__ import annotations

from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from policies.replica_ranking import ReplicaView, RouteTarget, rank_replicas
from pool.work import PoolWork

__all__ = ["TimeshareRequestRouter", "route_target", "replica_view"]


def route_target(pending_request: PendingRequest | None) -> RouteTarget:
    """The model/version/priority of a pending ``infer(PoolWork)`` call; empty otherwise."""
    if pending_request is None or not pending_request.args:
        return RouteTarget(None)
    work = pending_request.args[0]
    if not isinstance(work, PoolWork):
        return RouteTarget(None)
    return RouteTarget(work.model, work.version, work.priority)


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
