"""Timeshare's listener under Serve's autoscaler (#13, router.listener, router.scaling): requests
Serve never sees (they arrive on the listener's port) still scale the ingress out, through the
custom metric each replica reports and ``ingress_policy``. Real Ray Serve, real sockets."""

from __future__ import annotations

import shutil
import socket
import time

import httpx
import pytest

from tests.support.ports import free_port

HELD = 8


def _ingress_replicas(app_name: str) -> int:
    from ray import serve

    status = serve.status().applications.get(app_name)
    if status is None or "Ingress" not in status.deployments:
        return 0
    return status.deployments["Ingress"].replica_states.get("RUNNING", 0)


def _wait(predicate, what: str, timeout_s: float = 90.0) -> None:
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:.0f} s: {what}; "
                        f"status: {serve.status().applications.get('scaled')}")
        time.sleep(1)


def _hold(port: int) -> socket.socket:
    """A request on the listener that stays in flight: headers, then half its body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v2/models/iris-mlp1x16/infer HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"inputs\":")
    return s


def test_requests_on_the_listener_scale_the_ingress_out(app, tmp_path):
    from ray import serve

    from router.app import build_app

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(app.repo / "iris-mlp1x16", repo / "iris-mlp1x16")
    port = free_port()
    args = {
        "repository": str(repo), "environment": "test", "poll_interval_s": 0.5,
        "listener": {"port": port},
        # bodies that never finish stay in flight (the test's load), instead of being cut
        "edge": {"admission": {"body_grace_s": 120, "body_timeout_s": 120}},
        "ingress_autoscaling": {"min_replicas": 1, "max_replicas": 2,
                                "target_ongoing_requests": 2, "upscale_delay_s": 0,
                                "downscale_delay_s": 600},
        "cpu_pool": {"memory_budget_mb": 64},
    }
    # not waiting inside Serve: a replica that cannot be placed fails below, naming it
    serve.run_many([serve.RunTarget(build_app(args), name="scaled", route_prefix="/scaled")],
                   wait_for_ingress_deployment_creation=False,
                   wait_for_applications_running=False)
    held: list[socket.socket] = []
    try:
        _wait(lambda: _ingress_replicas("scaled") == 1, "the scaled app's ingress running")
        r = httpx.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=10)
        assert r.status_code == 200, r.text
        assert _ingress_replicas("scaled") == 1
        held = [_hold(port) for _ in range(HELD)]
        _wait(lambda: _ingress_replicas("scaled") >= 2,
              f"a second ingress replica with {HELD} requests in flight on the listener "
              f"(target 2 per replica)")
        # both replicas share the port: every new connection is answered
        for _ in range(6):
            assert httpx.get(f"http://127.0.0.1:{port}/v2/health/live",
                             timeout=10).status_code == 200
    finally:
        for s in held:
            s.close()
        serve.delete("scaled")
