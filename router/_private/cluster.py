"""The ingress's cluster-wide pieces (#19): caller quotas through Redis and their alert input."""

from __future__ import annotations

from fallbacks import CallerQuotas
from fallbacks.cluster_quotas import ClusterQuotas
from router.scaling import sharing_replicas
from router.settings import AppSettings

__all__ = ["build_quotas", "quota_stores_down"]


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
