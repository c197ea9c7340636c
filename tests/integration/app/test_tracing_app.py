"""Traces out on real Ray Serve: an app started with ``telemetry.otlp_endpoint`` exports each
request's stage spans to a real OTLP/HTTP receiver (a socket server decoding the protobuf,
tests/support/otlp.py). Its CPU pool is its own deployment, so the pool's queue, swap and compute
spans come from a ``PoolReply`` that crossed Ray. The caller's W3C trace context is the parent
through every front door: an HTTP header, gRPC metadata (sent by the unmodified
``tritonclient.grpc``), and a handle call made inside the caller's span (``TimeshareClient``)."""

from __future__ import annotations

import shutil
import time

import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.support.otlp import start_otlp_receiver
from tests.support.ports import free_port
from tests.support.v2 import v2_body

STAGES = {"timeshare.request", "timeshare.edge", "timeshare.cache", "timeshare.chain",
          "timeshare.pool.queue", "timeshare.pool.swap", "timeshare.pool.compute",
          "timeshare.answer"}
MODEL = "iris-mlp1x16"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
GRPC_TRACE_ID = "5bf92f3577b34da6a3ce929d0e0e4737"
HANDLE_TRACE_ID = "6bf92f3577b34da6a3ce929d0e0e4738"


def test_an_infer_over_http_exports_its_stage_spans(app, tmp_path):
    from ray import serve

    from router.app import build_app
    from router.client import TimeshareClient

    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copytree(app.repo / MODEL, repo / MODEL)
    receiver = start_otlp_receiver()
    port, grpc_port = free_port(), free_port()
    args = {
        "repository": str(repo), "environment": "test", "poll_interval_s": 0.5,
        "listener": {"port": port}, "grpc": {"port": grpc_port},
        "cpu_pool": {"placement": "deployment", "memory_budget_mb": 64},
        "call_log": {"path": str(tmp_path / "calls.jsonl")},
        # sample nothing on its own: only the caller's sampled parent makes this request traced
        "telemetry": {"otlp_endpoint": receiver.endpoint, "sample_ratio": 0.0,
                      "export_interval_ms": 100},
    }
    serve.run(build_app(args), name="traced", route_prefix="/traced")
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/v2/models/{MODEL}/ready", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{MODEL} not ready on the traced app within 120 s")
            time.sleep(0.5)
        x = np.array([[5.1, 3.5, 1.4, 0.2]], np.float32)
        unsampled = httpx.post(f"{url}/v2/models/{MODEL}/infer",
                               json={**v2_body("features", x), "id": "untraced-1"}, timeout=30)
        assert unsampled.status_code == 200, unsampled.text
        r = httpx.post(f"{url}/v2/models/{MODEL}/infer",
                       json={**v2_body("features", x + 1), "id": "traced-1"},
                       headers={"traceparent": f"00-{TRACE_ID}-00f067aa0ba902b7-01"}, timeout=30)
        assert r.status_code == 200, r.text
        grpc_client = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        try:
            tensor = tg.InferInput("features", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x + 2)
            grpc_client.infer(MODEL, [tensor], request_id="traced-grpc", headers={
                "traceparent": f"00-{GRPC_TRACE_ID}-00f067aa0ba902b8-01"})
        finally:
            grpc_client.close()
        caller = SpanContext(trace_id=int(HANDLE_TRACE_ID, 16), span_id=0x00F067AA0BA902B9,
                             is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(caller)))
        try:  # a Ray app's call inside its own span
            TimeshareClient(serve.get_app_handle("traced")).infer(
                MODEL, {"features": x + 3}, request_id="traced-handle")
        finally:
            otel_context.detach(token)
        ids = ("traced-1", "traced-grpc", "traced-handle")
        spans = receiver.wait_for(
            lambda got: all(STAGES <= {s.name for s in got
                                       if s.attributes.get("timeshare.request_id") == rid}
                            for rid in ids),
            30, "the traced requests' stage spans")
    finally:
        serve.delete("traced")
        receiver.stop()
    ours = [s for s in spans if s.attributes.get("timeshare.request_id") == "traced-1"]
    assert {s.name for s in ours} == STAGES
    assert all(s.attributes["timeshare.model"] == MODEL for s in ours)
    assert {s.trace_id for s in ours} == {TRACE_ID}  # the caller's trace continues
    root = next(s for s in ours if s.name == "timeshare.request")
    assert root.parent_span_id == "00f067aa0ba902b7"
    chain = next(s for s in ours if s.name == "timeshare.chain")
    for s in ours:
        if s.name.startswith("timeshare.pool."):  # built from the reply, inside the chain
            assert s.parent_span_id == chain.span_id
            assert chain.start_ns <= s.start_ns <= s.end_ns <= chain.end_ns
    compute = next(s for s in ours if s.name == "timeshare.pool.compute")
    assert compute.end_ns > compute.start_ns  # the pool measured a forward pass
    assert not [s for s in spans if s.attributes.get("timeshare.request_id") == "untraced-1"]
    for rid, trace_id, parent in (("traced-grpc", GRPC_TRACE_ID, "00f067aa0ba902b8"),
                                  ("traced-handle", HANDLE_TRACE_ID, "00f067aa0ba902b9")):
        theirs = [s for s in spans if s.attributes.get("timeshare.request_id") == rid]
        assert {s.name for s in theirs} == STAGES, rid
        assert {s.trace_id for s in theirs} == {trace_id}, rid  # the caller's trace continues
        root = next(s for s in theirs if s.name == "timeshare.request")
        assert root.parent_span_id == parent, rid
