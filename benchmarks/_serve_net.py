"""Ports for the HTTP benchmarks: a free local port, an app's direct-ingress replica port,
waiting until an app answers, and a local Serve instance under given Ray settings."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["free_port", "local_serve", "replica_port", "wait_serving"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def replica_port(app: str, timeout_s: float = 60.0) -> int:
    """The HTTP port of ``app``'s ingress replica under direct ingress (one replica here)."""
    import ray
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    assert client is not None, "Serve is not running"
    controller = client._controller
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for group in ray.get(controller.get_target_groups.remote(app)):
            if group.protocol == "HTTP" and group.targets and group.app_name == app:
                return int(group.targets[0].port)
        time.sleep(0.5)
    raise TimeoutError(f"{app}: no direct-ingress HTTP target within {timeout_s:.0f}s")


def wait_serving(probe: Callable[[], dict[str, Any]], app: str, timeout_s: float = 120.0) -> None:
    """Until ``probe()`` (a short load run: ``latencies_s``, ``errors``) gets an answer."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = probe()
            if r["latencies_s"]:
                return
            last = "; ".join(r["errors"]) or last
        except Exception as e:  # noqa: BLE001 - the proxy or the app is still starting
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.5)
    raise TimeoutError(f"{app} app not serving within {timeout_s:.0f}s ({last})")


@contextmanager
def local_serve(ray_env: dict[str, str], port: int, *, num_cpus: int = 2) -> Iterator[None]:
    """A local Ray instance with Serve's proxy on ``port``, started with ``ray_env`` in the
    environment (Ray Serve reads its settings there when its processes start); on exit Serve and
    Ray are shut down and the environment is restored."""
    import ray
    from ray import serve

    saved = {k: os.environ.get(k) for k in ray_env}
    os.environ.update(ray_env)
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
