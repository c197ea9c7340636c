"""router.grpc_v2 without Ray: the codec on real protobuf messages, and the service on a real
``grpc.aio`` server over a small Frontend (errors as status codes with trailing metadata, the
shared edge gate's refusal as UNAVAILABLE with a retry hint, a malformed body as
INVALID_ARGUMENT)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import numpy as np
import pytest

from policies.edge import EdgeConfig
from policies.priority import Priority
from router.edge import EdgeGate, EdgeSettings
from router.errors import (
    Forbidden,
    InvalidRequest,
    QuotaExceeded,
    ServiceUnavailable,
    TimeshareError,
    Unauthorized,
)
from router.frontend import Frontend
from router.grpc_v2 import GrpcSettings, InferenceService, start_grpc
from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb
from router.grpc_v2.codec import decode_model_infer, encode_model_infer
from router.schemas import InferenceRequest, InferenceResponse

X = np.arange(6, dtype=np.float32).reshape(2, 3)


def _request(*, raw: bool = True, datatype: str = "FP32", x: np.ndarray = X) -> Any:
    req = pb.ModelInferRequest(model_name="m", id="r1")
    t = req.inputs.add(name="x", datatype=datatype, shape=list(x.shape))
    if raw:
        req.raw_input_contents.append(x.tobytes())
    else:
        t.contents.fp32_contents.extend(x.reshape(-1).tolist())
    return req


@pytest.mark.parametrize("raw", [True, False])
def test_raw_and_typed_tensors_decode_alike_and_answer_in_kind(raw):
    decoded, got_raw = decode_model_infer(_request(raw=raw))
    assert got_raw is raw and decoded.request_id == "r1"
    np.testing.assert_array_equal(decoded.inputs["x"], X)
    answer = InferenceResponse(model="m", version="1", outputs={"y": X * 2}, request_id="r1",
                               served_by="cpu:m@1")
    resp = encode_model_infer(answer, decoded, raw=raw)
    assert resp.id == "r1" and resp.outputs[0].shape == [2, 3]
    y = (np.frombuffer(resp.raw_output_contents[0], np.float32) if raw
         else np.asarray(resp.outputs[0].contents.fp32_contents, np.float32))
    np.testing.assert_array_equal(y.reshape(2, 3), X * 2)
    assert resp.parameters["served_by"].string_param == "cpu:m@1"
    assert resp.parameters["degraded"].bool_param is False


def test_fp16_outputs_are_raw_even_for_a_typed_request():
    decoded, _ = decode_model_infer(_request(raw=False))
    answer = InferenceResponse(model="m", outputs={"y": X.astype(np.float16)}, request_id="r1",
                               served_by="cpu:m@1")
    resp = encode_model_infer(answer, decoded, raw=False)
    assert resp.outputs[0].datatype == "FP16" and len(resp.raw_output_contents) == 1


def _mutate(kind: str) -> Any:
    req = _request()
    if kind == "bytes":
        req.raw_input_contents[0] = b"\0" * 5
    elif kind == "count":
        req.raw_input_contents.append(b"")
    elif kind == "both":
        req.inputs[0].contents.fp32_contents.append(1.0)
    elif kind == "datatype":
        req.inputs[0].datatype = "FP33"
    elif kind == "typed_kind":
        req = _request(raw=False)
        req.inputs[0].contents.int_contents.append(1)
    elif kind == "fp16_typed":
        req = _request(raw=False, datatype="FP16")
    elif kind == "param":
        req.parameters["caller"].Clear()
    elif kind == "negative":
        req.inputs[0].shape[0] = -1
    return req


@pytest.mark.parametrize("kind, field", [
    ("bytes", "inputs.x raw_input_contents"), ("count", "raw_input_contents"),
    ("both", "inputs.x.contents"), ("datatype", "inputs.x.datatype"),
    ("typed_kind", "inputs.x.contents"), ("fp16_typed", "inputs.x.contents"),
    ("param", "parameters.caller"), ("negative", "inputs.x.shape"),
])
def test_bad_tensors_name_the_field(kind, field):
    with pytest.raises(InvalidRequest) as e:
        decode_model_infer(_mutate(kind))
    assert e.value.field == field and e.value.message.startswith(field)


class _Front(Frontend):
    """Answers, or raises the error it was given; records the requests it saw."""

    def __init__(self) -> None:
        self.error: TimeshareError | None = None
        self.seen: list[InferenceRequest] = []
        self.service: Any = None  # the service it fronts (set by the fixture)

    async def answer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(request)
        if self.error is not None:
            raise self.error
        return InferenceResponse(model=request.model, outputs={"y": X}, served_by="cpu:m@1",
                                 request_id=request.request_id)

    async def stream(self, request: InferenceRequest):
        """A fast answer then a refined one for model ``refine``; ``hang`` never answers
        (``self.running`` counts those waiting, ``self.cancelled`` those cancelled)."""
        self.seen.append(request)
        if self.error is not None:
            raise self.error
        if request.model == "hang":
            self.running += 1
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            finally:
                self.running -= 1
        if request.model == "refine":
            yield InferenceResponse(model="small", outputs={"y": X}, served_by="cpu:small@1",
                                    request_id=request.request_id, final=False)
        yield InferenceResponse(model=request.model, outputs={"y": X * 2}, served_by="cpu:m@1",
                                request_id=request.request_id)

    running = 0
    cancelled = 0

    def live_models(self) -> dict[str, Any]:
        return {}


@pytest.fixture
async def served():
    front = _Front()
    gate = EdgeGate(EdgeSettings(shed_to_fallback=False, admission=EdgeConfig(max_in_flight=4)))
    service = InferenceService(front, gate=gate, default_deadline_ms=5000)
    front.service = service  # tests adjust its settings between calls
    listener = await start_grpc(service, GrpcSettings(port=_free_port()), max_message_bytes=4096)
    assert listener is not None and listener.port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{listener.port}") as channel:
        yield front, gate, channel
    await listener.stop()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _call(channel, body: bytes, metadata=(), timeout: float | None = 10):
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                               request_serializer=lambda b: b,
                               response_deserializer=pb.ModelInferResponse.FromString)
    return await call(body, metadata=metadata, timeout=timeout)


@pytest.mark.parametrize("error, code", [
    (Unauthorized("caller_key: unknown key", field="caller_key"), "UNAUTHENTICATED"),
    (Forbidden("caller: the key is not 'bob'", field="caller"), "PERMISSION_DENIED"),
    (QuotaExceeded("caller: over its rate", field="caller"), "RESOURCE_EXHAUSTED"),
    (ServiceUnavailable("model: no replica", field="model"), "UNAVAILABLE"),
])
async def test_errors_are_status_codes_with_the_field_and_a_retry_hint(served, error, code):
    front, _, channel = served
    front.error = error
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _call(channel, _request().SerializeToString())
    assert e.value.code().name == code and e.value.details() == error.message
    trailing = dict(e.value.trailing_metadata())
    assert trailing["timeshare-field"] == error.field
    assert ("retry-after" in trailing) is (code in ("RESOURCE_EXHAUSTED", "UNAVAILABLE"))


async def test_key_metadata_and_grpc_deadline_reach_the_request(served):
    front, _, channel = served
    key = (("authorization", "Bearer k1"),)
    await _call(channel, _request().SerializeToString(), metadata=key, timeout=2.0)
    req = front.seen[-1]
    # The 2 s deadline arrives as the request's (gRPC's timeout header "may round up", per grpc
    # core's timeout encoding: seen 2007.8 ms remaining here, so no exact bound at 2000 - 20).
    assert req.caller_key == "k1" and 1000 < req.deadline_ms < 2100 and req.arrival_s
    # The margin for the way back is taken off it: pinned against a call whose margin is
    # 500 ms larger, which the header's rounding cannot blur.
    front.service.deadline_margin_ms += 500
    await _call(channel, _request().SerializeToString(), metadata=key, timeout=2.0)
    assert front.seen[-1].deadline_ms == pytest.approx(req.deadline_ms - 500, abs=200)


async def test_a_front_proxys_stamp_starts_the_calls_deadline(served):
    """``x-request-start`` (grpc.request_start, on by default): the wait in front counts. The
    request's deadline starts at the stamp, so the same gRPC timeout leaves it the time the
    call waited less; a stamp that leaves no time is DEADLINE_EXCEEDED; an unusable one is
    counted and ignored; with the setting off, or on a stream, it is not read."""
    import time

    front, gate, channel = served
    service = front.service
    body = _request().SerializeToString()

    def stamped(age_s: float) -> tuple[tuple[str, str], ...]:
        return (("x-request-start", f"t={time.time() - age_s:.3f}"),)

    t0 = time.monotonic()
    await _call(channel, body, timeout=2.0)
    plain = front.seen[-1]
    assert plain.arrival_s >= t0  # no stamp: the deadline starts on arrival here
    t0 = time.monotonic()
    await _call(channel, body, metadata=stamped(0.4), timeout=2.0)
    early = front.seen[-1]
    assert t0 - 0.45 < early.arrival_s < t0 - 0.3  # started at the stamp, 0.4 s back
    # the timeout counts from the stamp: the same deadline_ms from an earlier start
    assert early.deadline_ms == pytest.approx(plain.deadline_ms, abs=150)
    with pytest.raises(grpc.aio.AioRpcError) as e:  # waited 0.6 s of a 0.5 s deadline
        await _call(channel, body, metadata=stamped(0.6), timeout=0.5)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert dict(e.value.trailing_metadata())["timeshare-field"] == "deadline"
    assert service.stamps_ignored == 0
    t0 = time.monotonic()
    await _call(channel, body, metadata=(("x-request-start", "yesterday"),), timeout=2.0)
    assert service.stamps_ignored == 1 and front.seen[-1].arrival_s >= t0
    assert gate.state.counts["grpc_request_start:ignored"] == 1  # what /v2/status shows
    service.request_start_max_age_s = None  # grpc.request_start: false
    t0 = time.monotonic()
    await _call(channel, body, metadata=stamped(0.4), timeout=2.0)
    assert front.seen[-1].arrival_s >= t0
    service.request_start_max_age_s = 30.0
    t0 = time.monotonic()
    got = [r async for r in _stream_call(channel)(iter([_named("m", "s1")]), timeout=10,
                                                  metadata=stamped(0.4))]
    assert not got[0].error_message and front.seen[-1].arrival_s >= t0  # a stream: not read


async def test_trace_context_metadata_is_the_requests_and_a_stream_gives_it_to_each(served):
    front, _, channel = served
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    await _call(channel, _request().SerializeToString(),
                metadata=(("traceparent", parent), ("tracestate", "vendor=1")))
    assert front.seen[-1].trace_context == {"traceparent": parent, "tracestate": "vendor=1"}
    await _call(channel, _request().SerializeToString())
    assert front.seen[-1].trace_context is None
    # an over-long traceparent cannot be W3C's: ignored, the call still answers
    await _call(channel, _request().SerializeToString(), metadata=(("traceparent", "0" * 600),))
    assert front.seen[-1].trace_context is None
    got = [r async for r in _stream_call(channel)(iter([_named("m", "s1"), _named("m", "s2")]),
                                                  timeout=10, metadata=(("traceparent", parent),))]
    assert len(got) == 2 and not any(r.error_message for r in got)
    assert [r.trace_context for r in front.seen[-2:]] == [{"traceparent": parent}] * 2


async def test_the_shared_gate_refuses_with_unavailable_and_retry_after(served):
    _, gate, channel = served
    for _ in range(8):  # HTTP requests in flight on the same gate: over the batch class's share
        gate.state.started(Priority.BATCH)
    req = _request()
    req.parameters["priority"].string_param = "batch"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _call(channel, req.SerializeToString())
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE and "overload" in e.value.details()
    assert int(dict(e.value.trailing_metadata())["retry-after"]) >= 1


async def test_malformed_and_oversized_bodies(served):
    _, _, channel = served
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _call(channel, b"\xff\xff\xff")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "body" in e.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _call(channel, _request(x=np.zeros((64, 64), np.float32)).SerializeToString())
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (await _call(channel, _request().SerializeToString())).outputs[0].name == "y"


# -- ModelStreamInfer (Triton's streaming, what tritonclient's start_stream calls) ---------------
def _stream_call(channel):
    return channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                 request_serializer=lambda b: b,
                                 response_deserializer=pb.ModelStreamInferResponse.FromString)


def _named(model: str, rid: str, **kw: Any) -> bytes:
    req = _request(**kw)
    req.model_name, req.id = model, rid
    return req.SerializeToString()


async def test_stream_answers_each_request_fast_then_refined_with_final_flags(served):
    _, _, channel = served
    got = [r async for r in _stream_call(channel)(iter([_named("refine", "a"),
                                                        _named("m", "b")]), timeout=10)]
    assert all(not r.error_message for r in got)
    by_id: dict[str, list[Any]] = {}
    for r in got:
        by_id.setdefault(r.infer_response.id, []).append(r.infer_response)
    fast, refined = by_id["a"]  # in order for one request
    assert fast.model_name == "small" and refined.model_name == "refine"
    assert [a.parameters["triton_final_response"].bool_param for a in (fast, refined)] == [
        False, True]
    assert np.frombuffer(refined.raw_output_contents[0], np.float32).tolist() == (
        X * 2).reshape(-1).tolist()
    (only,) = by_id["b"]
    assert only.parameters["triton_final_response"].bool_param is True
    assert only.parameters["served_by"].string_param == "cpu:m@1"


async def test_a_bad_request_is_an_error_in_band_and_the_stream_goes_on(served):
    _, _, channel = served
    bad = _request()
    bad.raw_input_contents[0] = b"\0" * 5
    bad.id = "bad"
    got = [r async for r in _stream_call(channel)(
        iter([b"\xff\xff\xff", bad.SerializeToString(), _named("m", "ok")]), timeout=10)]
    errors = sorted(r.error_message for r in got if r.error_message)
    assert len(errors) == 2
    assert errors[0].startswith("body: not a valid inference.ModelInferRequest")
    assert errors[1].startswith("inputs.x raw_input_contents")
    assert [r.infer_response.id for r in got if r.error_message.startswith("inputs")] == ["bad"]
    assert [r.infer_response.id for r in got if not r.error_message] == ["ok"]


async def test_a_cancelled_stream_cancels_its_requests_and_the_bound_holds(served):
    front, _, channel = served
    front.service.stream_max_in_flight = 2
    sent = asyncio.Queue()

    async def requests():
        for i in range(4):  # four hanging requests: only two may run at once
            await sent.put(i)
            yield _named("hang", f"h{i}")
        await asyncio.Event().wait()  # the client keeps the stream open

    call = _stream_call(channel)(requests(), timeout=30)
    reader = asyncio.ensure_future(call.read())
    for _ in range(200):
        if front.running == 2:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert front.running == 2  # the third is not started while two run
    call.cancel()
    for _ in range(200):
        if front.running == 0:
            break
        await asyncio.sleep(0.01)
    assert front.running == 0 and front.cancelled == 2
    reader.cancel()
