"""One real Timeshare app on a local Ray Serve for the whole test session.

Ray and the app start once (a few tens of seconds on 2 cores) and every test in this folder
shares them; tests that change the repository use their own model names so they cannot disturb
each other. The app gets a private redis-server (so a test may stop it) when the binary is
installed, and a real HTTP alert receiver on loopback.
"""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from deploy.ray_env import THREAD_ENV
from tests.integration.app.appkit import App, make_chaos_model
from tests.support.app import API_KEY
from tests.support.ports import free_port
from tests.support.receiver import start_receiver
from tests.support.redis import RedisServer, redis_binary

ROUTES = [
    {"name": "digits", "strategy": "cascade", "cheap": "digits-small",
     "expensive": "digits-large", "threshold": 0.9, "spill": "cheap"},
    {"name": "digits-refine", "strategy": "fast-then-refine", "cheap": "digits-small",
     "expensive": "digits-large", "spill": "none"},
]


def _alerting(receiver_url: str) -> dict:
    return {
        "environment": "prod",
        "route": {"receiver": "hook", "group_by": ["alertname", "model"], "group_wait": "1s",
                  "group_interval": "2s", "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "send_resolved": True,
                       "channels": [{"type": "webhook", "url": receiver_url}]}],
        "rules": {
            "min_requests": 5,
            "error_rate": {"severity": "P1", "for": "1s", "threshold": 0.5, "window": "4s"},
            # The error-rate rule (test_alerts_e2e) and the model-load rule (test_refusals, at its
            # default P3) matter here; the others are exercised by the alerting unit tests and
            # would only add noise.
            "latency_slo": {"enabled": False},
            "degraded_share": {"enabled": False},
            "shed_share": {"enabled": False},
            "breaker_open": {"enabled": False},
            "cache_tier_down": {"enabled": False},
        },
    }


@pytest.fixture(scope="session")
def app(demo_repo_master, tmp_path_factory):
    import ray
    from ray import serve

    from router.app import build_app

    root = tmp_path_factory.mktemp("app")
    repo = root / "repo"
    shutil.copytree(demo_repo_master, repo)
    make_chaos_model(repo, "chaos-hang", hang_s=3.0, deadline_ms=300, fallback=[
        {"kind": "rules", "rules": [{"name": "iris-rule", "type": "threshold",
                                     "input": "features", "reduce": "max", "op": "lt", "value": 1e9,
                                     "outputs": {"logits": [[9.0, 0.0, 0.0]]}}]},
        {"kind": "default", "outputs": {"logits": [[0.0, 0.0, 0.0]]}}])
    make_chaos_model(repo, "chaos-fail", fallback=[{"kind": "model", "model": "iris-mlp1x16"}])
    make_chaos_model(repo, "chaos-alert")  # no fallback: its failures are errors
    redis_bin = redis_binary()
    redis = RedisServer(redis_bin) if redis_bin else None
    if redis:
        redis.start()
    receiver = start_receiver()
    http_port, grpc_port, listener_port = free_port(), free_port(), free_port()
    call_log = root / "calllog.jsonl"
    # 6 logical CPUs: this app takes 3 replicas of one CPU each; the listener's autoscaling
    # test adds an app that grows to 3 more (Ray schedules by these counts, not by cores)
    # the replicas' torch threads as `make serve` sets them (deploy.ray_env.THREAD_ENV): on two
    # cores a spinning OpenMP thread would take time from the tests' own timing
    for k, v in THREAD_ENV.items():
        os.environ.setdefault(k, v)
    ray.init(num_cpus=6, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": http_port})
    args = {
        "repository": str(repo), "environment": "test", "routes": ROUTES, "api_key": API_KEY,
        "poll_interval_s": 0.3, "default_deadline_ms": 5000,
        # A killed server refuses connections at once; the timeout only has to outlast a busy
        # 2-core machine, so a slow answer is not mistaken for an outage.
        "cache": {"redis_url": redis.url if redis else None, "redis_timeout_s": 0.5},
        "alerting": _alerting(receiver.url("/alerts")), "alert_eval_interval_s": 0.5,
        "call_log": {"path": str(call_log)},
        # The operator allows the chaos factory the fault tests' models name (common.trust).
        "trust": {"allowed_modules": ["deploy.demo_models", "deploy.chaos"]},
        # The CPU pool as its own deployment (as with GPUs), so tests see the two-hop path, the
        # request router and a pool replica that can be killed; e2e covers the default placement.
        "cpu_pool": {"placement": "deployment", "memory_budget_mb": 512},
        # only the fault tests' dedicated caller is limited; every other caller is unlimited
        "quotas": {"callers": {"faults-quota": {"rate_per_s": 0.5, "burst": 2}}},
        "grpc": {"port": grpc_port},  # the Open Inference Protocol over gRPC (test_grpc.py)
        # Timeshare's own HTTP port (router.listener), as deploy/config.yaml has it: the
        # contract test holds both front doors to the OpenAPI document
        "listener": {"port": listener_port},
    }
    serve.run(build_app(args), name="timeshare", route_prefix="/")
    url = f"http://127.0.0.1:{http_port}"
    a = App(url=url, repo=repo, handle=serve.get_app_handle("timeshare"), redis=redis,
            receiver=receiver, call_log=call_log, grpc=f"127.0.0.1:{grpc_port}",
            listener=f"http://127.0.0.1:{listener_port}")
    a.wait_for(lambda: httpx.get(f"{url}/v2/health/ready").status_code == 200, 120, "ready")
    yield a
    serve.shutdown()
    ray.shutdown()
    receiver.server.shutdown()
    if redis:
        redis.stop()


@pytest.fixture
def http(app):
    with app.client() as c:
        yield c
