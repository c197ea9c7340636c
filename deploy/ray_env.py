"""The Ray Serve settings Timeshare is served under, chosen by measurement.

Ray Serve reads these from the environment of its own processes (controller, proxy, replicas)
when they start, so they cannot live in ``deploy/config.yaml``: an application's
``runtime_env.env_vars`` reach its replicas only, never the controller or the proxy.
``timeshare serve`` (``make serve``) starts ``serve run`` with them; a value already set in the
caller's environment wins, so ``RAY_SERVE_THROUGHPUT_OPTIMIZED=0 make serve`` turns them off.
Starting Ray another way (``serve run`` by hand, ``ray start``), export them first:
``export $(python -m deploy.ray_env)``.

Why these (``benchmarks.http_throughput``, both apps under the same settings, docs/PERFORMANCE.md
"Ray Serve fast paths, measured"):
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["SERVE_ENV", "serve_environment"]

SERVE_ENV: dict[str, str] = {}


def serve_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with Timeshare's Ray Serve settings added where it does not set them."""
    return {**SERVE_ENV, **environ}


if __name__ == "__main__":  # `export $(python -m deploy.ray_env)`
    print(" ".join(f"{k}={v}" for k, v in SERVE_ENV.items()))
