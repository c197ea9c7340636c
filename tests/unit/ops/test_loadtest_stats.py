"""Figures, stability, SLO verdicts and the sweep knee from known samples (pure logic)."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.loadtest import LatencyHistogram, LoadTestConfig, Outcome, Sample
from deploy.loadtest._private.stats import find_knee, stability, summarize_run, windows
from deploy.loadtest.config import StabilityConfig


def cfg(**over: object) -> LoadTestConfig:
    raw = {
        "target": {"url": "http://x"},
        "models": [{"name": "m"}],
        "inputs": [{"name": "x", "shape": [1]}],
        "arrival": {"rate": 100},
        "duration_s": 4,
        "warmup_s": 1,
        "stability": {"window_s": 1, "windows": 3, "tolerance": 0.1},
        "slo": {"p99_ms": 50, "error_rate": 0.05},
    }
    raw.update(over)
    return LoadTestConfig.model_validate(raw)


def sample(t: float, lat: float, *, model: str = "m", prio: str = "interactive",
           lag: float = 0.0, outcome: Outcome | None = None, warmup: float = 1.0) -> Sample:
    return Sample(request_id=f"r{t}", planned_s=t, lag_s=lag, latency_s=lat,
                  service_s=lat - lag, model=model, priority=prio, caller="c",
                  measured=t >= warmup, outcome=outcome or Outcome(status=200))


def test_histogram_percentiles_within_documented_precision() -> None:
    rng = np.random.default_rng(1)
    vals = rng.lognormal(np.log(0.02), 0.8, size=20_000)
    h = LatencyHistogram(vals)
    ranked = np.sort(vals)
    for key, p in (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9)):
        exact = ranked[round(p / 100 * len(vals)) - 1] * 1000  # rank p% of n, as HDR does
        assert h.summary_ms()[key] == pytest.approx(exact, rel=2e-3)
    assert h.summary_ms()["max"] == pytest.approx(vals.max() * 1000, rel=1e-3)
    assert LatencyHistogram().summary_ms()["p99"] is None
    h2 = LatencyHistogram([0.0, 7200.0])  # outside 1 us .. 1 h: clamped and counted
    assert h2.clamped == 2 and h2.summary_ms()["max"] == pytest.approx(3600e3, rel=1e-3)


def test_summary_counts_errors_shares_groups_and_lag() -> None:
    c = cfg()
    samples = [sample(0.5, 0.9, lag=0.5)]  # warm-up: ignored, its lag included
    for i in range(400):
        t = 1 + i / 100
        if i % 40 == 0:
            samples.append(sample(t, 0.2, outcome=Outcome(error="http_503", status=503)))
        elif i % 10 == 0:
            samples.append(sample(t, 0.01, model="n", prio="batch", outcome=Outcome(
                status=200, degraded=True, served_by="rules", reason="shed", cache="bypass")))
        else:
            samples.append(sample(t, 0.01 + (i % 10) / 1000, lag=0.02 if i == 7 else 0.0,
                                  outcome=Outcome(status=200, served_by="gpu:m@1", cache="miss")))
    run = summarize_run(samples, cfg=c, rate=100.0)
    assert run["planned"] == 400 and run["ok"] == 390
    assert run["errors"] == {"total": 10, "rate": 0.025, "by_class": {"http_503": 10}}
    assert run["throughput_rps"] == pytest.approx(390 / 4)
    assert run["throughput_ratio"] == pytest.approx(390 / 400)
    assert run["shares"]["degraded"] == pytest.approx(30 / 390)
    assert run["shares"]["fallback_served_by"] == {"rules": 1.0}
    assert run["shares"]["cache"] == pytest.approx({"miss": 360 / 390, "bypass": 30 / 390})
    assert run["by_model"]["n"]["requests"] == 30 and run["by_model"]["n"]["degraded_share"] == 1
    assert set(run["by_priority"]) == {"batch", "interactive"}
    assert run["latency_ms"]["max"] == pytest.approx(19, rel=1e-3)  # 503's 200 ms excluded
    assert run["generator"]["late_sends"] == 1 and not run["generator"]["behind"]
    assert run["slo_ok"] is True
    assert [w["requests"] for w in run["windows"]] == [100, 100, 100, 100]
    assert run["stability"]["stable"] is True


def test_slo_failures_and_generator_behind() -> None:
    c = cfg(slo={"p99_ms": 50, "error_rate": 0.0, "degraded_share": 0.1,
                 "min_throughput_ratio": 0.99})
    samples = [sample(1 + i / 100, 0.1, lag=0.05) for i in range(100)]
    samples[0] = sample(1, 0.1, outcome=Outcome(error="generator_overload"))
    run = summarize_run(samples, cfg=c, rate=100.0)
    verdict = {r["name"]: r["ok"] for r in run["slo"]}
    assert verdict == {"p99_ms": False, "error_rate": False, "degraded_share": True,
                       "min_throughput_ratio": True}
    assert run["slo_ok"] is False
    assert run["generator"]["behind"] is True


def test_stability_needs_agreeing_windows() -> None:
    sc = StabilityConfig(window_s=1, windows=3, tolerance=0.1)
    steady = [sample(t / 10, 0.010) for t in range(40)]
    wins = windows(steady, start_s=0, duration_s=4, window_s=1)
    assert stability(wins, sc)["stable"] is True
    rising = [sample(t / 10, 0.010 * (1 + t // 10)) for t in range(40)]
    verdict = stability(windows(rising, start_s=0, duration_s=4, window_s=1), sc)
    assert verdict["stable"] is False and "p99" in verdict["reason"]
    assert "only 2 complete windows" in stability(wins[:2], sc)["reason"]


def _run(rate: float, p99: float, ok: bool, ratio: float = 1.0) -> dict[str, object]:
    return {"target_rps": rate, "latency_ms": {"p99": p99}, "slo_ok": ok,
            "throughput_ratio": ratio, "throughput_rps": rate * ratio}


def test_knee_is_last_passing_rate_and_where_latency_turns_up() -> None:
    runs = [_run(10, 10, True), _run(20, 12, True), _run(40, 25, True), _run(80, 400, False)]
    k = find_knee(runs, knee_factor=2.0, min_ratio=0.95)
    assert k["slo_knee_rps"] == 40 and k["latency_knee_rps"] == 40
    assert k["max_throughput_rps"] == 80
    saturating = [_run(10, 10, True), _run(20, 11, True, ratio=0.8)]
    assert find_knee(saturating, knee_factor=2.0, min_ratio=0.95)["latency_knee_rps"] == 20
    failing = [_run(10, 10, False), _run(20, 11, True)]
    assert find_knee(failing, knee_factor=2.0, min_ratio=0.95)["slo_knee_rps"] is None


def test_one_late_send_in_a_small_window_does_not_mark_it_behind() -> None:
    """At 25 sends a window's lag p99 is its maximum: one hiccup is not the generator behind."""
    c = cfg(arrival={"rate": 25})
    late_at = {1.52: 0.004, 2.2: 0.004, 2.6: 0.004}  # one in [1, 2), two in [2, 3)
    samples = [sample(t, 0.01 + lag, lag=lag) for t in np.arange(1.0, 5.0, 0.04).round(2)
               for lag in [late_at.get(float(t), 0.0)]]
    wins = windows(samples, start_s=1, duration_s=3, window_s=1, lag_warn_ms=2.0)
    assert [w["late_sends"] for w in wins] == [1, 2, 0]
    assert wins[0]["lag_p99_ms"] > 2.0  # the p99 of 25 sends is the late one
    gen = summarize_run(samples, cfg=c, rate=25)["generator"]
    assert gen["behind_windows"] == [2.0]
