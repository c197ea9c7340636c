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
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SERVE_ENV", "serve_environment"]

SERVE_ENV: dict[str, str] = {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}


def serve_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with Timeshare's Ray Serve settings added where it does not set them."""
    return {**SERVE_ENV, **environ}


if __name__ == "__main__":  # `export $(python -m deploy.ray_env)`
    print(" ".join(f"{k}={v}" for k, v in SERVE_ENV.items()))
