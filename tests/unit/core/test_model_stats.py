import numpy as np
import pytest

from policies.priority import Priority
from router._private.model_stats import ModelStatsRecorder
from router.errors import InvalidRequest, QuotaExceeded, ServiceUnavailable
from router.schemas import InferenceRequest, InferenceResponse
from tests.support.clocks import FakeClock


def _req(model: str) -> InferenceRequest:
    return InferenceRequest(model=model, inputs={"x": np.zeros((1, 2), np.float32)})


def _resp(model: str, *, cache: str = "miss", degraded: bool = False,
          reason: str | None = None) -> InferenceResponse:
    return InferenceResponse(request_id="r", model=model, version="1", outputs={},
                             served_by="cpu:x@1", cache=cache, degraded=degraded, reason=reason)


def test_rate_p99_and_shares_over_the_window() -> None:
    now = [100.0]
    r = ModelStatsRecorder(window_s=30, rate_window_s=10, clock=lambda: now[0])
    for i in range(100):
        now[0] = 100.0 + i * 0.2  # 5 per second over 20 s
        hit = i % 4 == 0
        r.record(_req("a"), _resp("a", cache="memory" if hit else "miss", degraded=i % 10 == 0),
                 None, elapsed_s=(i + 1) / 1000)
    r.record(_req("b"), None, ValueError("x"), elapsed_s=0.5)
    snap = r.snapshot()
    a = snap["a"]
    assert a["requests"] == 100
    assert a["rate_per_s"] == 5.0  # the last 10 s: 50 requests
    assert a["p99_ms"] == 99.0
    assert a["cache_hit_share"] == 0.25 and a["degraded_share"] == 0.1 and a["error_share"] == 0
    assert snap["b"]["error_share"] == 1.0
    now[0] += 31
    a = r.snapshot()["a"]
    assert a["rate_per_s"] == 0 and a["p99_ms"] is None and a["requests"] == 100


def test_models_are_bounded_least_recent_dropped() -> None:
    r = ModelStatsRecorder(max_models=2, max_samples=3)
    for name in ("a", "b", "a", "c"):
        r.record(_req(name), None, None, elapsed_s=0.001)
    assert set(r.snapshot()) == {"a", "c"}


def test_per_class_latency_shed_refused_and_errors() -> None:
    clock = FakeClock(600.0)
    r = ModelStatsRecorder(clock=clock)

    def req(priority: str, arrival_s: float | None = None) -> InferenceRequest:
        return InferenceRequest(model="a", inputs={"x": np.zeros((1, 2), np.float32)},
                                priority=priority, arrival_s=arrival_s)

    for i in range(10):
        clock.set(600.0 + i)
        r.record(req("realtime"), _resp("a"), None, elapsed_s=0.010)
        # from the edge's arrival stamp when there is one: 80 ms, not the pipeline's 50
        r.record(req("batch", arrival_s=clock() - 0.080), _resp("a"), None, elapsed_s=0.050)
    r.record(req("batch"), _resp("a", degraded=True, reason="shed: batch over capacity"), None,
             elapsed_s=0.001)
    r.record(req("batch"), _resp("a", degraded=True, reason="error: RequestExpired"), None,
             elapsed_s=0.002)
    r.record(req("batch"), None, ServiceUnavailable("x", cause="refused"), elapsed_s=0.002)
    r.record(req("background"), None, ServiceUnavailable("x", cause="shed"), elapsed_s=0.002)
    r.record(req("background"), None, QuotaExceeded("over quota"), elapsed_s=0.0)
    r.record(req("background"), None, RuntimeError("boom"), elapsed_s=0.0)
    r.record(req("background"), None, InvalidRequest("bad", field="inputs.x"), elapsed_s=0.0)
    r.edge_refused(Priority.INTERACTIVE)
    clock.set(610.0)
    snap = r.classes.snapshot()
    rt, batch = snap["by_class"]["realtime"], snap["by_class"]["batch"]
    bg, inter = snap["by_class"]["background"], snap["by_class"]["interactive"]
    assert rt["requests"] == 10 and rt["rate_per_s"] == 1.0
    assert rt["latency_ms"]["p99"] == pytest.approx(10.0, rel=0.06)
    assert batch["latency_ms"]["p50"] == pytest.approx(80.0, rel=0.06)
    assert (rt["shed"], rt["refused"], rt["errors"]) == (0, 0, 0)
    assert batch["requests"] == 12 and (batch["shed"], batch["refused"]) == (1, 2)
    assert bg["requests"] == 0 and (bg["shed"], bg["refused"], bg["errors"]) == (2, 0, 1)
    assert inter["shed"] == 1 and inter["requests"] == 0
