"""``timeshare demo traffic``'s report: the client's per-class latency (cache hits apart) with the
pool's queue wait and compute, and the server's own per-class view from ``/v2/status``."""

from __future__ import annotations

from deploy.demo_traffic import Tally, report, server_report


def test_the_client_report_keeps_cache_hits_apart_and_shows_the_pools_timings() -> None:
    t = Tally()
    for i in range(100):
        t.add("realtime", "ok", 5.0 + i / 100, {"queue_ms": 0.5, "compute_ms": 0.2})
        t.add("realtime", "cache hit", 1.0, {"cache": "memory"})
        t.add("batch", "ok", 50.0, {"queue_ms": 40.0, "compute_ms": 3.0})
    t.add("batch", "http 503", 2.0, {})
    outcomes, table = report(t, 10.0).split("\n\n")
    assert "batch http 503" in outcomes and "realtime cache hit" in outcomes
    rows = [" ".join(line.split()) for line in table.splitlines()]
    assert rows[0].startswith("client side, whole run req/s p50 / p99 ms pool queue wait")
    assert rows[1:] == ["realtime 10.0 5.5 / 6.0 0.5 / 0.5 0.2 / 0.2",
                        "realtime cache hit 10.0 1.0 / 1.0 – –",  # never queued: no pool time
                        "batch 10.1 50.0 / 50.0 40.0 / 40.0 3.0 / 3.0"]


def test_the_server_report_reads_each_class_and_each_device() -> None:
    status = {
        "classes": {"window_s": 30.0, "by_class": {
            "realtime": {"requests": 90, "rate_per_s": 3.0, "shed": 0, "refused": 1,
                         "latency_ms": {"p50": 4.0, "p99": 9.0}},
            "interactive": {"requests": 0, "rate_per_s": 0.0, "shed": 0, "refused": 0,
                            "latency_ms": {"p50": None, "p99": None}},
            "batch": {"requests": 30, "rate_per_s": 1.0, "shed": 2, "refused": 0,
                      "latency_ms": {"p50": 60.0, "p99": 200.0}}}},
        "pools": {"cpu": {"device": {"classes": {"by_class": {
            "realtime": {"queue_ms": {"p50": 0.3, "p99": 2.0},
                         "compute_ms": {"p50": 0.2, "p99": 1.0}},
            "batch": {"queue_ms": {"p50": 45.0, "p99": 150.0},
                      "compute_ms": {"p50": 3.0, "p99": 9.0}}}}}}},
    }
    out = [" ".join(line.split()) for line in server_report(status).splitlines()]
    assert out[0].startswith("server side, last 30 s (/v2/status)")
    assert out[1:] == ["realtime @ cpu 3.0 4.0 / 9.0 0.3 / 2.0 0.2 / 1.0 0 1",
                       "batch @ cpu 1.0 60.0 / 200.0 45.0 / 150.0 3.0 / 9.0 2 0"]
    assert "no per-class view" in server_report({"pools": {}})
