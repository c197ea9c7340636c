"""A fuzz test of the gRPC surface (#39, router.grpc_v2) against the real app: bytes that are not
protobuf, and well-formed ``ModelInferRequest``s with mismatched shapes, byte counts, datatypes
and contents. No call may end ``INTERNAL`` or ``UNKNOWN`` (a client's mistake is never the
server's error), and the server answers a good request afterwards."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

SERVER_FAULTS = (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
METHODS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
           "ModelInfer")
DATATYPES = ("FP32", "FP64", "FP16", "INT8", "INT32", "INT64", "UINT8", "UINT64", "BOOL",
             "BYTES", "fp32", "")
CONTENTS = ("fp32_contents", "fp64_contents", "int_contents", "int64_contents",
            "uint_contents", "uint64_contents", "bool_contents", "bytes_contents")
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def channel(app):
    with grpc.insecure_channel(app.grpc) as ch:
        yield ch


def _raw_call(channel, method: str, body: bytes):
    call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}",
                               request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    try:
        call(body, timeout=30)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


@given(method=st.sampled_from(METHODS), body=st.binary(max_size=256))
@FUZZ
def test_bytes_that_are_not_protobuf(channel, method, body):
    code, details = _raw_call(channel, method, body)
    assert code not in SERVER_FAULTS, (method, body, code, details)


@st.composite
def infer_requests(draw) -> service_pb2.ModelInferRequest:
    req = service_pb2.ModelInferRequest(
        model_name=draw(st.sampled_from(["digits-small", "iris-mlp1x16", "digits", "nope", ""])),
        model_version=draw(st.sampled_from(["", "1", "9", "x" * 300])))
    raw = draw(st.booleans())
    for _ in range(draw(st.integers(0, 3))):
        t = req.inputs.add(name=draw(st.sampled_from(["pixels", "features", "", "pixels"])),
                           datatype=draw(st.sampled_from(DATATYPES)),
                           shape=draw(st.lists(st.integers(-2, 70), max_size=4)
                                      | st.just([2**40, 2**40])))
        if raw:
            req.raw_input_contents.append(draw(st.binary(max_size=600)))
        else:
            field = draw(st.sampled_from(CONTENTS))
            values = {"fp32_contents": st.floats(width=32), "fp64_contents": st.floats(),
                      "int_contents": st.integers(-2**31, 2**31 - 1),
                      "int64_contents": st.integers(-2**63, 2**63 - 1),
                      "uint_contents": st.integers(0, 2**32 - 1),
                      "uint64_contents": st.integers(0, 2**64 - 1),
                      "bool_contents": st.booleans(), "bytes_contents": st.binary(max_size=8)}
            getattr(t.contents, field).extend(draw(st.lists(values[field], max_size=140)))
    if raw and draw(st.booleans()):
        req.raw_input_contents.append(b"\0\0\0\0")  # one entry more than inputs
    for name in draw(st.lists(st.sampled_from(["logits", "nope", ""]), max_size=2)):
        req.outputs.add(name=name)
    for key in draw(st.lists(st.sampled_from(["priority", "deadline_ms", "timeout", "caller",
                                              "cache_skip_read", "text"]), max_size=3)):
        p = req.parameters[key]
        kind = draw(st.sampled_from(["bool", "int", "str", "double", "uint", "none"]))
        if kind == "bool":
            p.bool_param = draw(st.booleans())
        elif kind == "int":
            p.int64_param = draw(st.integers(-2**63, 2**63 - 1))
        elif kind == "str":
            p.string_param = draw(st.text(max_size=20))
        elif kind == "double":
            p.double_param = draw(st.floats())
        elif kind == "uint":
            p.uint64_param = draw(st.integers(0, 2**64 - 1))
    return req


@given(req=infer_requests())
@FUZZ
def test_mismatched_infer_requests(channel, req):
    code, details = _raw_call(channel, "ModelInfer", req.SerializeToString())
    assert code not in SERVER_FAULTS, (req, code, details)


def test_serves_afterwards(channel):
    req = service_pb2.ModelInferRequest(model_name="digits-small")
    req.inputs.add(name="pixels", datatype="FP32", shape=[1, 64])
    req.raw_input_contents.append(np.zeros((1, 64), np.float32).tobytes())
    stub = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                               request_serializer=service_pb2.ModelInferRequest.SerializeToString,
                               response_deserializer=service_pb2.ModelInferResponse.FromString)
    resp = stub(req, timeout=30)
    assert np.frombuffer(resp.raw_output_contents[0], np.float32).shape == (10,)
