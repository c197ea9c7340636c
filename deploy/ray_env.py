"""The Ray Serve settings Timeshare is served under, chosen by measurement.

Ray Serve reads these from the environment of its own processes (controller, proxy, replicas)
when they start, so they cannot live in ``deploy/config.yaml``: an application's
``runtime_env.env_vars`` reach its replicas only, never the controller or the proxy.
``timeshare serve`` (``make serve``) starts ``serve run`` with them; a value already set in the
caller's environment wins, so ``RAY_SERVE_THROUGHPUT_OPTIMIZED=0 make serve`` turns them off.
Starting Ray another way (``serve run`` by hand, ``ray start``), export them first:
``export $(python -m deploy.ray_env)``.

Why these (``benchmarks.http_throughput``, both apps under the same settings, docs/PERFORMANCE.md
"Ray Serve fast paths, measured"): Ray's throughput-optimized mode (user code and the handle's
router on the replica's own event loop, gRPC between proxy and replicas, buffered request logs,
GC frozen after start, direct ingress) took the stock deployment from 4.5 to 0.24 ms at c=1 and
from 390 to 3400 req/s at c=16, and Timeshare from 5.3 to 1.5 ms and 279 to 406 req/s (its
cache hits from 284 to 2324 req/s). With direct ingress the ingress replica also listens on its
own port (the first on a node gets 30000, ``RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT``): no proxy
in the path; Serve's proxy on port 8000 still answers as before.

``THREAD_ENV`` is for the same processes' torch, not for Serve: ``OMP_WAIT_POLICY=PASSIVE``
makes the OpenMP threads of torch's CPU forwards sleep as soon as a parallel region ends,
instead of spinning for it to come back (libgomp's default). On a machine whose cores the
replicas' event loops, device threads and other replicas share, a spinning thread takes a core
that a loop is waiting for: with it, Timeshare's cache-bypassed HTTP p99 at 250 req/s halved
(about 9 to 4 ms, four runs, docs/PERFORMANCE.md "The bypassed path's tail at low load"), with
c=16 throughput unchanged. The price: a large multi-threaded CPU forward in isolation, such as
a 4-layer 1024-wide MLP on a batch of 64, takes about 10 % longer. ``OMP_WAIT_POLICY=ACTIVE
make serve`` restores spinning.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["ENV", "SERVE_ENV", "THREAD_ENV", "serve_environment", "served_logging_config"]

CONFIG = Path(__file__).with_name("config.yaml")

SERVE_ENV: dict[str, str] = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}  # Ray Serve reads these
THREAD_ENV: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}  # torch's OpenMP (libgomp) reads this
ENV: dict[str, str] = {**SERVE_ENV, **THREAD_ENV}


def serve_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with Timeshare's settings (``ENV``) added where it does not set them."""
    return {**ENV, **environ}


def served_logging_config() -> dict[str, Any]:
    """The Timeshare application's Serve ``logging_config`` in ``deploy/config.yaml`` (what
    ``make serve`` runs): benchmarks give their stock arms the same."""
    import yaml

    app = yaml.safe_load(CONFIG.read_text())["applications"][0]
    return dict(app.get("logging_config") or {})


if __name__ == "__main__":  # `export $(python -m deploy.ray_env)`
    print(" ".join(f"{k}={v}" for k, v in ENV.items()))
