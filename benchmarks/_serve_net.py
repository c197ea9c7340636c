"""Ports for the HTTP benchmarks: a free local port, an app's direct-ingress replica port, and
waiting until an app answers."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

__all__ = ["free_port", "replica_port", "wait_serving"]


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
