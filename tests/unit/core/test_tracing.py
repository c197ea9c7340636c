"""Request traces (router.tracing): spans built from measured timings, the traced pipeline over
a real in-process pool, parent-based sampling, and the app's ``telemetry`` setting exporting to a
real OTLP/HTTP receiver (a socket server decoding the protobuf)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from pydantic import ValidationError

from alerting.telemetry import Telemetry
from fallbacks import ModelReply
from router.cache import CacheSettings, ResultCache
from router.catalog import ModelCatalog
from router.client import TimeshareClient
from router.pipeline import Pipeline, PipelineConfig
from router.pool_client import LocalPoolClient
from router.routes import build_strategy, load_routes
from router.schemas import InferenceRequest, InferenceResponse, RouteInfo
from router.settings import TelemetrySettings
from router.trace_context import from_metadata
from router.tracing import (
    ModelStage,
    RequestTracer,
    TraceContextMiddleware,
    TracedPipeline,
    pool_stage_times,
)
from tests.support.app import start_ingress, stop_ingress
from tests.support.otlp import start_otlp_receiver
from tests.support.v2 import v2_body

POOL_STAGES = {"timeshare.pool.queue", "timeshare.pool.swap", "timeshare.pool.compute"}
MISS = {"timeshare.request", "timeshare.edge", "timeshare.cache", "timeshare.chain",
        "timeshare.answer"} | POOL_STAGES
HIT = {"timeshare.request", "timeshare.edge", "timeshare.cache", "timeshare.answer"}


# -- spans from timings (pure) --------------------------------------------------------------
def test_pool_stages_follow_received_at_in_order() -> None:
    reply = ModelReply({}, queue_ms=4.0, swap_ms=2.0, compute_ms=3.0, received_at=1000.010)
    # pipeline clock = wall - 900: the pool took the work at 100.010 on the pipeline's clock
    (q, s, c) = pool_stage_times(reply, 100.0, 100.030, offset=900.0)
    assert q == pytest.approx((100.010, 100.014))
    assert s == pytest.approx((100.014, 100.016))
    assert c == pytest.approx((100.016, 100.019))


@pytest.mark.parametrize("received_at, start", [
    (999.0, 100.0),      # the pool host's clock a second behind: not before the chain starts
    (1001.0, 100.021),   # a second ahead: still ends by the chain's end (30 ms - 9 ms)
    (0.0, 100.021),      # unknown: the pool's stages end when the chain ends
])
def test_pool_stages_stay_inside_the_chain(received_at: float, start: float) -> None:
    reply = ModelReply({}, queue_ms=4.0, swap_ms=2.0, compute_ms=3.0, received_at=received_at)
    (q, _, c) = pool_stage_times(reply, 100.0, 100.030, offset=900.0)
    assert q[0] == pytest.approx(start)
    assert c[1] == pytest.approx(start + 0.009)
    assert 100.0 <= q[0] and c[1] <= 100.030 + 1e-9


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_spans_are_built_from_the_stamps_and_the_pool_reply() -> None:
    t = Telemetry.in_memory()
    clock = _Clock(50.0)
    tracer = RequestTracer(t.tracer, clock=clock, wall=lambda: 1050.0)  # offset 1000 s
    req = InferenceRequest(model="digits-small", inputs={"pixels": np.zeros((1, 64))},
                           caller="team-a")
    req.arrival_s = 49.990
    tr = tracer.begin(req, 50.0)
    assert tr is not None
    tr.stages.append(ModelStage(
        "digits-small", start=50.001, end=50.040, cache="miss", chain_start=50.002,
        chain_end=50.030, pool="cpu", served_by="cpu:digits-small@1",
        reply=ModelReply({}, queue_ms=5.0, swap_ms=1.0, compute_ms=10.0,
                         received_at=1050.004)))
    resp = InferenceResponse(request_id=req.request_id, model="digits-small",
                             served_by="cpu:digits-small@1", cache="miss", pool="cpu")
    tracer.finish(tr, resp, None, 50.045)
    spans = {s.name: s for s in t.span_exporter.get_finished_spans()}
    assert set(spans) == MISS

    def ms(name: str) -> tuple[float, float]:  # (start, end) in ms after 1049.99 s (arrival)
        s = spans[name]
        return (round(s.start_time / 1e6 - 1049990, 3), round(s.end_time / 1e6 - 1049990, 3))

    assert ms("timeshare.request") == (0.0, 55.0)
    assert ms("timeshare.edge") == (0.0, 10.0)
    assert ms("timeshare.cache") == (11.0, 12.0)
    assert ms("timeshare.chain") == (12.0, 40.0)
    assert ms("timeshare.pool.queue") == (14.0, 19.0)
    assert ms("timeshare.pool.swap") == (19.0, 20.0)
    assert ms("timeshare.pool.compute") == (20.0, 30.0)
    assert ms("timeshare.answer") == (40.0, 55.0)
    root = spans["timeshare.request"]
    for s in spans.values():
        assert s.context.trace_id == root.context.trace_id
        assert s.attributes["timeshare.request_id"] == req.request_id
        assert s.attributes["timeshare.model"] == "digits-small"
    chain = spans["timeshare.chain"].context.span_id
    for name in POOL_STAGES:
        assert spans[name].parent.span_id == chain
    for name in ("timeshare.edge", "timeshare.cache", "timeshare.chain", "timeshare.answer"):
        assert spans[name].parent.span_id == root.context.span_id
    assert root.attributes["timeshare.caller"] == "team-a"
    assert root.attributes["timeshare.served_by"] == "cpu:digits-small@1"
    assert spans["timeshare.chain"].attributes["timeshare.pool"] == "cpu"
    t.shutdown()


def test_a_route_parents_its_models_and_an_error_marks_the_root() -> None:
    t = Telemetry.in_memory()
    tracer = RequestTracer(t.tracer, clock=_Clock(10.0), wall=lambda: 10.0)
    req = InferenceRequest(model="digits", inputs={"pixels": np.zeros((1, 64))})
    tr = tracer.begin(req, 10.0)
    assert tr is not None
    tr.stages += [ModelStage("digits-small", 10.0, 10.01, "memory"),
                  ModelStage("digits-large", 10.01, 10.03, "miss", chain_start=10.011,
                             chain_end=10.02, served_by="rules:r", degraded=True,
                             reason="timeout")]
    resp = InferenceResponse(request_id=req.request_id, model="digits", served_by="rules:r",
                             route=RouteInfo(route="digits", strategy="cascade",
                                             decision="escalated"))
    tracer.finish(tr, resp, RuntimeError("late"), 10.04)
    spans = t.span_exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    # no pool ran the large model's answer (rules did): no pool spans
    assert names == sorted(["timeshare.request", "timeshare.edge", "timeshare.route",
                            "timeshare.cache", "timeshare.cache", "timeshare.chain",
                            "timeshare.answer"])
    route = next(s for s in spans if s.name == "timeshare.route")
    caches = [s for s in spans if s.name == "timeshare.cache"]
    assert all(s.parent.span_id == route.context.span_id for s in caches)
    assert {s.attributes["timeshare.model"] for s in caches} == {"digits-small", "digits-large"}
    assert route.attributes["timeshare.decision"] == "escalated"
    root = next(s for s in spans if s.name == "timeshare.request")
    assert root.status.status_code == trace.StatusCode.ERROR
    assert root.attributes["error.type"] == "RuntimeError"
    t.shutdown()


# -- the traced pipeline over a real in-process pool ----------------------------------------
ROUTES = load_routes([{"name": "digits", "strategy": "cascade", "cheap": "digits-small",
                       "expensive": "digits-large", "threshold": 0.99, "spill": "cheap"}])


def _traced(host, telemetry: Telemetry) -> TracedPipeline:
    async def fetch():
        return host.index()

    return TracedPipeline(ModelCatalog(fetch), {"cpu": LocalPoolClient(host)},
                          config=PipelineConfig(default_deadline_ms=5000), routes=ROUTES,
                          strategies={n: build_strategy(rc) for n, rc in ROUTES.items()},
                          cache=ResultCache(CacheSettings()),
                          tracer=RequestTracer(telemetry.tracer))


def _by_request(telemetry: Telemetry) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in telemetry.span_exporter.get_finished_spans():
        out.setdefault(s.attributes["timeshare.request_id"], []).append(s)
    return out


async def test_a_miss_then_a_hit_through_the_traced_pipeline(host) -> None:
    t = Telemetry.in_memory()
    pipe = _traced(host, t)
    await pipe.catalog.refresh()
    x = {"pixels": np.full((1, 64), 2.0, np.float32)}
    try:
        miss = await pipe.infer(InferenceRequest(model="digits-small", inputs=x))
        hit = await pipe.infer(InferenceRequest(model="digits-small", inputs=x))
        routed = await pipe.infer(InferenceRequest(model="digits", inputs=x))
    finally:
        await pipe.cache.close()
    assert (miss.cache, hit.cache) == ("miss", "memory")
    spans = _by_request(t)
    assert {s.name for s in spans[miss.request_id]} == MISS
    assert {s.name for s in spans[hit.request_id]} == HIT
    assert {s.name for s in spans[routed.request_id]} >= {"timeshare.route", "timeshare.cache"}
    for rid, got in spans.items():
        assert len({s.context.trace_id for s in got}) == 1, rid  # one trace per request
    for s in spans[miss.request_id]:
        assert s.attributes["timeshare.model"] == "digits-small"
        assert s.end_time >= s.start_time
    by_name = {s.name: s for s in spans[miss.request_id]}
    chain, compute = by_name["timeshare.chain"], by_name["timeshare.pool.compute"]
    assert chain.start_time <= by_name["timeshare.pool.queue"].start_time
    assert compute.end_time <= chain.end_time
    assert compute.end_time - compute.start_time == pytest.approx(
        miss.timings.compute_ms * 1e6, abs=1e3)  # the pool's measured compute, to a µs
    t.shutdown()


async def test_sampling_is_parent_based(host) -> None:
    t = Telemetry.in_memory(sample_ratio=0.0)
    pipe = _traced(host, t)
    await pipe.catalog.refresh()
    x = {"pixels": np.full((1, 64), 3.0, np.float32)}
    try:
        unsampled = await pipe.infer(InferenceRequest(model="digits-small", inputs=x))
        parent = SpanContext(trace_id=0x1234, span_id=0x99, is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED))
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(parent)))
        try:
            sampled = await pipe.infer(InferenceRequest(model="digits-small", inputs=x))
        finally:
            otel_context.detach(token)
    finally:
        await pipe.cache.close()
    spans = _by_request(t)
    assert unsampled.request_id not in spans  # ratio 0, no parent: nothing built
    root = next(s for s in spans[sampled.request_id] if s.name == "timeshare.request")
    assert root.context.trace_id == 0x1234 and root.parent.span_id == 0x99
    t.shutdown()


async def test_a_requests_trace_context_is_its_parent_and_decides_its_sampling(host) -> None:
    """gRPC metadata and handle calls carry the caller's context in the request itself; it wins
    over the current context (an HTTP header's), and a parent that says not sampled is obeyed
    even at ratio 1.0."""
    t = Telemetry.in_memory(sample_ratio=1.0)
    pipe = _traced(host, t)
    await pipe.catalog.refresh()
    x = {"pixels": np.full((1, 64), 5.0, np.float32)}
    sampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    dropped = "00-0af7651916cd43dd8448eb211c80319d-b7ad6b7169203332-00"
    ambient = SpanContext(trace_id=0x77, span_id=0x88, is_remote=True,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED))
    try:
        token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(ambient)))
        try:
            kept = await pipe.infer(InferenceRequest(
                model="digits-small", inputs=x,
                trace_context={"traceparent": sampled, "tracestate": "v=1"}))
        finally:
            otel_context.detach(token)
        left_out = await pipe.infer(InferenceRequest(
            model="digits-small", inputs=x, cache={"skip_read": True},
            trace_context={"traceparent": dropped}))
        garbled = await pipe.infer(InferenceRequest(
            model="digits-small", inputs=x, cache={"skip_read": True},
            trace_context={"traceparent": "not-a-traceparent"}))
    finally:
        await pipe.cache.close()
    spans = _by_request(t)
    root = next(s for s in spans[kept.request_id] if s.name == "timeshare.request")
    assert root.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert root.parent.span_id == 0xB7AD6B7169203331 and root.parent.is_remote
    assert root.context.trace_state.get("v") == "1"
    assert left_out.request_id not in spans  # the caller's decision: not sampled
    root = next(s for s in spans[garbled.request_id] if s.name == "timeshare.request")
    assert root.parent is None  # W3C: an unparsable traceparent starts a new trace
    t.shutdown()


def test_trace_context_is_checked_and_read_from_metadata_and_the_current_span() -> None:
    x = {"pixels": np.zeros((1, 64), np.float32)}
    with pytest.raises(ValidationError, match="unknown keys"):
        InferenceRequest(model="m", inputs=x, trace_context={"baggage": "a=1"})
    with pytest.raises(ValidationError, match="over 512"):
        InferenceRequest(model="m", inputs=x, trace_context={"traceparent": "0" * 513})
    md = {"traceparent": "00-ab-cd-01", "tracestate": "s" * 600}.get
    assert from_metadata(md) == {"traceparent": "00-ab-cd-01"}  # an over-long state is dropped
    assert from_metadata({"tracestate": "a=1"}.get) is None
    assert from_metadata({"traceparent": b"00"}.get) is None  # binary metadata: not W3C's
    assert TimeshareClient.request("m", x).trace_context is None  # no current span
    caller = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=False,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))
    token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(caller)))
    try:
        req = TimeshareClient.request("m", x)
        given = TimeshareClient.request("m", x, trace_context=None)
    finally:
        otel_context.detach(token)
    assert req.trace_context == {
        "traceparent": "00-00000000000000000000000000000abc-0000000000000def-01"}
    assert given.trace_context is None  # the caller's own choice stands


async def test_the_traceparent_header_becomes_the_parent() -> None:
    seen = []

    async def app(scope, receive, send):
        seen.append(trace.get_current_span().get_span_context())

    mw = TraceContextMiddleware(app)
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await mw({"type": "http", "headers": [(b"traceparent", tp.encode())]}, None, None)
    await mw({"type": "http", "headers": []}, None, None)
    assert seen[0].trace_id == 0x0AF7651916CD43DD8448EB211C80319C and seen[0].trace_flags == 1
    assert not seen[1].is_valid  # no header: no parent
    assert not trace.get_current_span().get_span_context().is_valid  # detached after


# -- the app's setting ------------------------------------------------------------------------
def test_telemetry_settings_validate_at_load() -> None:
    assert TelemetrySettings().otlp_endpoint is None
    assert TelemetrySettings(otlp_endpoint="http://c:4318").otlp_endpoint == \
        "http://c:4318/v1/traces"
    with pytest.raises(ValueError, match="otlp_endpoint"):
        TelemetrySettings(otlp_endpoint="c:4318")
    with pytest.raises(ValueError, match="max_export_batch"):
        TelemetrySettings(max_queue_spans=10, max_export_batch=11)


async def test_tracing_off_builds_the_plain_pipeline(demo_repo_master, tmp_path) -> None:
    ing = await start_ingress({
        "repository": str(demo_repo_master), "state_dir": str(tmp_path / "state"),
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 64},
        "call_log": {"path": str(tmp_path / "calls.jsonl")}}, ready=("digits-small",))
    try:
        assert type(ing.pipeline) is Pipeline and not ing.telemetry.tracing
        assert not any(m.cls is TraceContextMiddleware for m in ing._app.user_middleware)
    finally:
        await stop_ingress(ing)


async def test_the_setting_exports_otlp_spans_to_a_real_receiver(demo_repo_master,
                                                                 tmp_path) -> None:
    receiver = start_otlp_receiver()
    ing = await start_ingress({
        "repository": str(demo_repo_master), "state_dir": str(tmp_path / "state"),
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 64},
        "call_log": {"path": str(tmp_path / "calls.jsonl")},
        "telemetry": {"otlp_endpoint": receiver.endpoint, "export_interval_ms": 50}},
        ready=("digits-small",))
    try:
        assert isinstance(ing.pipeline, TracedPipeline)
        transport = httpx.ASGITransport(app=ing.__serve_build_asgi_app__())
        async with httpx.AsyncClient(transport=transport, base_url="http://ts") as c:
            body = {**v2_body("pixels", np.full((1, 64), 4.0)), "id": "trace-me-1"}
            r = await c.post("/v2/models/digits-small/infer", json=body)
        assert r.status_code == 200, r.text
    finally:
        await stop_ingress(ing)  # flushes the batch processor
        receiver.stop()
    ours = [s for s in receiver.received() if s.attributes["timeshare.request_id"] == "trace-me-1"]
    assert {s.name for s in ours} == MISS
    assert all(s.attributes["timeshare.model"] == "digits-small" for s in ours)
    assert {s.service for s in ours} == {"timeshare"}
    assert set(receiver.posts) == {"application/x-protobuf"}
