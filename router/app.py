"""The app builder named by ``deploy/config.yaml`` (``import_path: router.app:build_app``)."""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.serve import Application
from ray.serve.config import BackpressureConfig, RequestRouterConfig

from alerting.config import load_config
from alerting.deployment import AlerterDeployment
from pool.deployments import PoolDeployment
from router.ingress import Ingress
from router.scaling import replica_options
from router.settings import AppSettings, device_spec, load_settings

__all__ = ["build_app", "build_from_settings"]

log = logging.getLogger(__name__)

def _gpu_count() -> int:
    try:
        if not ray.is_initialized():
            return 0  # building without a cluster (e.g. `serve build`): decided by 'enabled'
        return int(ray.cluster_resources().get("GPU", 0))
    except Exception:
        return 0


def build_from_settings(settings: AppSettings) -> Application:
    settings.resolved_caller_keys()  # a malformed $caller_keys_env fails here, naming it
    pool_options = {"request_router_config": RequestRouterConfig(
        request_router_class="pool.request_router:TimeshareRequestRouter",  # type: ignore[arg-type]
        request_routing_stats_period_s=1.0)}  # type: ignore[arg-type]
    common = {
        "repository": settings.repository,
        "state_dir": settings.resolved_state_dir(),
        "poll_interval_s": settings.poll_interval_s,
        "compile_cache_dir": settings.compile_cache_dir,
        "trust": settings.trust,
    }
    gpu = settings.gpu_pool
    gpus = _gpu_count()
    pools = {}
    if gpu.enabled == "on" or (gpu.enabled == "auto" and gpus > 0):
        replicas = max(1, min(gpu.replicas, gpus) if gpus else gpu.replicas)
        pools["gpu"] = PoolDeployment.options(  # type: ignore[attr-defined]
            name="GPUPool", num_replicas=replicas, ray_actor_options={"num_gpus": 1},
            **pool_options).bind(pool="gpu", device=device_spec("cuda", gpu), replicas=replicas,
                                 **common)
    cpu = settings.cpu_pool
    if cpu.placement == "auto":
        # Without GPUs the CPU pool is the only pool: a separate deployment would only add a hop.
        cpu = cpu.model_copy(update={"placement": "deployment" if pools else "ingress"})
        settings = settings.model_copy(update={"cpu_pool": cpu})
    if cpu.placement == "deployment":
        pools["cpu"] = PoolDeployment.options(  # type: ignore[attr-defined]
            name="CPUPool", **replica_options(cpu.replicas, cpu.autoscaling), **pool_options
        ).bind(pool="cpu", device=device_spec("cpu", cpu), replicas=cpu.replicas, **common)
    alerter = None
    if settings.alerting is not None:
        load_config(settings.alerting)  # fail at build time, naming the bad key
        alerter = AlerterDeployment.bind(settings.alerting)  # type: ignore[attr-defined]
    log.info("timeshare: pools %s, repository %s", sorted(pools), settings.repository)
    edge = settings.edge
    # Bounded queues in front of the ingress (#14): Ray's proxy answers 503 with Retry-After
    # at once past max_queued_requests instead of queueing without bound.
    return Ingress.options(  # type: ignore[attr-defined]
        **replica_options(settings.ingress_replicas, settings.ingress_autoscaling,
                          policy="router.scaling:ingress_policy"),
        max_ongoing_requests=edge.ingress_max_ongoing_requests,
        max_queued_requests=edge.ingress_max_queued_requests,
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=1),
    ).bind(settings, pools, alerter)


def build_app(args: dict[str, Any]) -> Application:
    """Build the ``timeshare`` application from ``deploy/config.yaml`` args."""
    return build_from_settings(load_settings(dict(args)))
