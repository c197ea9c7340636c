import numpy as np

from router._private.model_stats import ModelStatsRecorder
from router.schemas import InferenceRequest, InferenceResponse


def _req(model: str) -> InferenceRequest:
    return InferenceRequest(model=model, inputs={"x": np.zeros((1, 2), np.float32)})


def _resp(model: str, *, cache: str = "miss", degraded: bool = False) -> InferenceResponse:
    return InferenceResponse(request_id="r", model=model, version="1", outputs={},
                             served_by="cpu:x@1", cache=cache, degraded=degraded)


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
