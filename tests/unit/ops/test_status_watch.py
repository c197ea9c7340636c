"""``timeshare status --watch``: the frame it renders, and one snapshot when not on a TTY."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rich.console import Console

from deploy.status_watch import Rates, render, watch


def _status(swaps: int, preemptions: int, *, chunks: int = 0, compute_s: float = 0.0) -> dict:
    return {
        "pools": {"cpu": {"pool": "cpu", "device": {
            "device": "cpu", "resident": ["big@1", "small@1"],
            "chunks": chunks, "compute_s": compute_s,
            "resident_bytes": {"big@1": 600 * 1024, "small@1": 2048},
            "host_tier": ["big@1", "small@1", "cold@1"],
            "queue_depth": {"realtime": 0, "interactive": 2, "batch": 7, "background": 0},
            "swaps": {"count": swaps, "bytes": swaps << 20, "ms": 12.0},
            "evictions": 5, "preemptions": preemptions,
            "memory": {"used_bytes": 1 << 20, "total_bytes": 2 << 20, "host_used_bytes": 3 << 20},
            "classes": {"window_s": 30.0, "by_class": {
                "realtime": {"requests": 40, "rate_per_s": 1.3, "refused": 0,
                             "queue_ms": {"p50": 0.4, "p99": 2.5, "mean": 0.6},
                             "compute_ms": {"p50": 1.1, "p99": 3.2, "mean": 1.2}},
                "batch": {"requests": 20, "rate_per_s": 0.7, "refused": 3,
                          "queue_ms": {"p50": 61.0, "p99": 240.0, "mean": 80.0},
                          "compute_ms": {"p50": 9.5, "p99": 30.0, "mean": 10.0}}}},
        }, "models": {"big": {}, "small": {}, "cold": {}}}},
        "classes": {"window_s": 30.0, "by_class": {
            "realtime": {"requests": 40, "rate_per_s": 1.3, "shed": 0, "refused": 0, "errors": 0,
                         "latency_ms": {"p50": 4.2, "p99": 11.7, "mean": 5.0}},
            "batch": {"requests": 20, "rate_per_s": 0.7, "shed": 4, "refused": 3, "errors": 1,
                      "latency_ms": {"p50": 88.0, "p99": 310.0, "mean": 99.0}}}},
        "breakers": {"big@cpu": "open", "small@cpu": "closed"},
        "models": {"big": {"rate_per_s": 4.0, "p99_ms": 80.5, "cache_hit_share": 0.25,
                           "degraded_share": 0.5}},
        "firing_alerts": [{"alertname": "TimeshareSwapThrashing", "severity": "P3"}],
    }


def _text(view) -> str:
    c = Console(file=io.StringIO(), width=140, color_system=None)
    c.print(view)
    return c.file.getvalue()


def test_a_frame_shows_devices_models_and_alerts_with_rates_between_polls() -> None:
    rates = Rates()
    first = " ".join(_text(render(_status(10, 1, chunks=100, compute_s=1.0), rates, at=100.0,
                                  source="test")).split())
    assert "busy – " in first  # one poll: no interval yet
    out = " ".join(_text(render(_status(30, 5, chunks=180, compute_s=2.76), rates, at=102.0,
                                source="test")).split())
    # 80 batches and 1.76 s of forward passes in 2 s: busy 88 %, 40 batches/s, 22 ms each
    assert "busy 88% (40.0 batches/s, forward 22.0 ms)" in out
    assert "swaps 10.0/s (30 total" in out
    assert "preemptions 2.0/s (5 total)" in out
    assert "realtime 0 interactive 2 batch 7 background 0" in out
    assert "big@1 600K, small@1 2K" in out  # resident by bytes, largest first
    assert "host tier (1) cold@1" in out
    assert "cpu open" in out and "80.5" in out and "25%" in out and "50%" in out
    assert "TimeshareSwapThrashing P3" in out and "1 alert(s) firing" in out
    # per priority class: rate, p50/p99 end to end, queue wait against compute, shed/refused
    assert "priority classes (last 30 s" in out
    assert "realtime │ 1.3 │ 4.2 │ 11.7 │ 0.4 / 2.5 │ 1.1 / 3.2 │ 0 │ 0 │ 0" in out
    assert "batch │ 0.7 │ 88.0 │ 310.0 │ 61.0 / 240.0 │ 9.5 / 30.0 │ 4 │ 3 │ 1" in out
    assert "background │ – │ – │ – │ – │ – │ 0 │ 0 │ 0" in out  # no request seen


def test_an_idle_device_between_two_polls_shows_no_forward_time() -> None:
    rates = Rates()
    rates.update("cpu:cpu", 10.0, 0, 0, batches=7, compute_s=0.5)
    idle = rates.update("cpu:cpu", 11.0, 0, 0, batches=7, compute_s=0.5)
    assert idle.busy == 0.0 and idle.batches_per_s == 0.0 and idle.forward_ms is None
    # a replica that restarted (its counters went back) reads as idle, not negative
    again = rates.update("cpu:cpu", 12.0, 0, 0, batches=2, compute_s=0.1)
    assert again.busy == 0.0 and again.batches_per_s == 0.0


def test_a_frame_lists_refused_and_failed_configs_and_versions_with_their_reasons() -> None:
    status = _status(1, 0)
    out = " ".join(_text(render(status, Rates(), at=1.0, source="test")).split())
    assert "refused or failed: none" in out
    status["pools"]["cpu"]["models"]["evil"] = {
        "state": "refused", "default_version": None, "versions": {},
        "problem": {"state": "refused", "reason": "evil/config.yaml [architecture]: not allowed",
                    "file": "evil/config.yaml", "field": "architecture"}}
    status["pools"]["cpu"]["models"]["big"] = {
        "state": "ready", "default_version": "1", "versions": {
            "1": {"state": "ready", "reason": None, "file": None, "field": None},
            "2": {"state": "failed", "reason": "big/2/model.pt [inputs]: warm-up failed",
                  "file": "big/2/model.pt", "field": "inputs"}}}
    out = " ".join(_text(render(status, Rates(), at=2.0, source="test")).split())
    assert ("refused or failed: big version 2 failed: big/2/model.pt [inputs]: warm-up failed "
            "evil config refused: evil/config.yaml [architecture]: not allowed") in out


def test_off_a_tty_it_prints_one_snapshot_and_returns(tmp_path) -> None:
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(self.headers.get("X-API-Key"))
            body = json.dumps(_status(3, 0)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = io.StringIO()
        record = tmp_path / "frames.txt"
        rc = watch(f"http://127.0.0.1:{server.server_port}", api_key="k", interval_s=0.01,
                   frames=None, record=record, console=Console(file=out, width=140))
    finally:
        server.shutdown()
    assert rc == 0 and seen == ["k"]  # one poll, with the operator key
    assert "resident (2)" in out.getvalue() and "resident (2)" in record.read_text()
