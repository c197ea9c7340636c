"""Pieces the ingress builds from its settings at start-up (kept out of the deployment class)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import prometheus_client

from pool.deployments import log_pool_to_serve
from pool.service import PoolService
from router.cache import MiniLMEmbedder, SharedEmbedder
from router.routes import build_strategy, load_routes
from router.settings import AppSettings, cpu_device

__all__ = ["embedder", "route_strategies", "serve_metrics", "start_local_pool"]

log = logging.getLogger("ray.serve")

# The longest chunk the ingress's in-process pool runs on the ingress's own loop: a few requests'
# worth of the loop's own work (docs/PERFORMANCE.md, eleventh session).
INGRESS_INLINE_MS = 1.0


async def start_local_pool(s: AppSettings) -> PoolService | None:
    """The CPU pool inside the ingress (``cpu_pool.placement: ingress``), started; else None."""
    if s.cpu_pool.placement != "ingress":
        return None
    # The ingress's loop must stay responsive (deadlines, fallbacks) even while a model runs or
    # hangs: only a model proven bounded by its input shapes may run a chunk on it, and only a
    # chunk of at most INGRESS_INLINE_MS; every other chunk goes to the device thread.
    device = {**cpu_device(s.cpu_pool), "inline_bounded_only": True,
              "inline_ms": min(s.cpu_pool.inline_ms, INGRESS_INLINE_MS)}
    log_pool_to_serve()  # its refusals reach the ingress replica's log, as a pool replica's do
    local = PoolService(
        "cpu", s.repository, s.resolved_state_dir(), device,
        poll_interval_s=s.poll_interval_s, replicas=s.ingress_replicas, trust=s.trust,
        compile_cache_dir=s.compile_cache_dir)
    await local.start()
    return local


def route_strategies(s: AppSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The configured routes and a strategy for each (paths relative to the routes file)."""
    routes = load_routes(s.routes) if s.routes else {}
    base = Path(s.routes).parent if isinstance(s.routes, str) else None
    return routes, {n: build_strategy(rc, base_dir=base) for n, rc in routes.items()}


def embedder(s: AppSettings, *, routes_read_text: bool = False) -> Any:
    """The shared text embedder when the semantic cache or a text route needs one."""
    if not s.cache.semantic_dir and not routes_read_text:
        return None

    return SharedEmbedder(MiniLMEmbedder.load())


def serve_metrics(port: int) -> None:
    """Expose this replica's metrics on ``port``; a second replica on the node logs, not crashes.

    One port serves one process: with several ingress replicas on a node only the first binds it
    (docs/SCALING.md). Failing the replica for it would take serving down for a metrics endpoint.
    """
    try:
        prometheus_client.start_http_server(port, addr="127.0.0.1")
    except OSError as e:
        log.warning("prometheus_port %d not served by this replica (%s): another process on "
                    "this node holds it", port, e)
