"""The app builder named by ``deploy/config.yaml`` (``import_path: router.app:build_app``)."""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.serve import Application
from ray.serve.config import RequestRouterConfig

from pool.deployments import PoolDeployment
from router.ingress import Ingress
from router.settings import AppSettings, load_settings

__all__ = ["build_app", "build_from_settings"]

log = logging.getLogger(__name__)

MB = 1 << 20


def _gpu_count() -> int:
    try:
        if not ray.is_initialized():
            return 0  # building without a cluster (e.g. `serve build`): decided by 'enabled'
        return int(ray.cluster_resources().get("GPU", 0))
    except Exception:
        return 0


def _device(kind: str, s) -> dict[str, Any]:
    return {
        "kind": kind,
        "memory_budget_bytes": int(s.memory_budget_mb * MB) if s.memory_budget_mb else None,
        "reserve_bytes": int(s.reserve_mb * MB),
        "host_budget_bytes": int(s.host_budget_mb * MB) if s.host_budget_mb else None,
        "slice_ms": s.slice_ms,
        "chunk_size": s.chunk_size,
        "threads": s.threads,
    }


def build_from_settings(settings: AppSettings) -> Application:
    pool_options = {"request_router_config": RequestRouterConfig(
        request_router_class="pool.request_router:TimeshareRequestRouter",
        request_routing_stats_period_s=1.0)}
    common = {
        "repository": settings.repository,
        "state_dir": settings.resolved_state_dir(),
        "poll_interval_s": settings.poll_interval_s,
    }
    cpu = settings.cpu_pool
    pools = {
        "cpu": PoolDeployment.options(name="CPUPool", num_replicas=cpu.replicas, **pool_options).bind(
            pool="cpu", device=_device("cpu", cpu), replicas=cpu.replicas, **common
        )
    }
    gpu = settings.gpu_pool
    gpus = _gpu_count()
    if gpu.enabled == "on" or (gpu.enabled == "auto" and gpus > 0):
        replicas = max(1, min(gpu.replicas, gpus) if gpus else gpu.replicas)
        pools["gpu"] = PoolDeployment.options(
            name="GPUPool", num_replicas=replicas, ray_actor_options={"num_gpus": 1},
            **pool_options).bind(pool="gpu", device=_device("cuda", gpu), replicas=replicas, **common)
    alerter = None
    if settings.alerting is not None:
        from alerting.config import load_config
        from alerting.deployment import AlerterDeployment

        load_config(settings.alerting)  # fail at build time, naming the bad key
        alerter = AlerterDeployment.bind(settings.alerting)
    log.info("timeshare: pools %s, repository %s", sorted(pools), settings.repository)
    return Ingress.options(num_replicas=settings.ingress_replicas).bind(settings, pools, alerter)


def build_app(args: dict[str, Any]) -> Application:
    """Build the ``timeshare`` application from ``deploy/config.yaml`` args."""
    return build_from_settings(load_settings(dict(args)))
