"""The ingress's cluster-wide pieces (#19): caller quotas through Redis, their alert input, and
the per-replica view that /v2/status aggregates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ray
from ray import serve

from fallbacks import BreakerRegistry, CallerQuotas
from fallbacks.cluster_quotas import ClusterQuotas
from router._private.replica_views import ReplicaViews
from router.scaling import sharing_replicas
from router.settings import AppSettings

__all__ = ["build_quotas", "build_views", "own_view", "quota_stores_down"]


def build_quotas(s: AppSettings) -> CallerQuotas | None:
    """Cluster-wide limits when ``quotas.redis_url`` is set, else this replica's share of them
    (1/N of every limit with N ingress replicas)."""
    if s.quotas is None:
        return None
    n = sharing_replicas(s.ingress_replicas, s.ingress_autoscaling)
    if s.quotas.redis_url:
        return ClusterQuotas(s.quotas, replicas=n)
    return CallerQuotas(s.quotas, share=1.0 / n)


def quota_stores_down(quotas: CallerQuotas | None) -> frozenset[str]:
    """``{"redis"}`` while the cluster quota store is unavailable (the quota_store_down rule)."""
    if isinstance(quotas, ClusterQuotas) and quotas.redis_available is False:
        return frozenset({"redis"})
    return frozenset()


def build_views(s: AppSettings) -> ReplicaViews:
    """This replica's publisher of its status view, through the quota or cache Redis."""
    try:
        rid = serve.get_replica_context().replica_id
        name, app = rid.unique_id, rid.deployment_id.app_name
    except Exception:  # noqa: BLE001 - outside a Serve replica (tests building the ingress)
        name, app = "local", "timeshare"
    url = (s.quotas.redis_url if s.quotas else None) or s.cache.redis_url
    return ReplicaViews(url, key_prefix=f"timeshare:replicas:{app}:", replica=name,
                        ttl_s=max(5.0, 5 * min(s.poll_interval_s, 1.0)))


def own_view(breakers: BreakerRegistry, quotas: CallerQuotas | None,
             cache_redis: bool | None, edge: Mapping[str, int] | None = None) -> dict[str, Any]:
    """What this replica alone knows: its breakers, its view of the shared stores, and its
    edge's counters (``edge``: shed and refused by reason, ignored X-Request-Start stamps)."""
    try:
        node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001
        node = None
    return {
        "node": node,
        "breakers": {f"{m}@{p}": st.value.lower() for (m, p), st in breakers.states().items()},
        "quota_store_down": bool(quota_stores_down(quotas)),
        "cache_redis_available": cache_redis,
        "edge": dict(edge or {}),
    }
