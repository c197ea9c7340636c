"""The v2 codec and input validation: pure, no Ray."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pool.config import ModelConfig
from router.errors import InvalidRequest, PayloadTooLarge
from router.schemas import InferenceResponse, Timings
from router.v2 import decode_infer_request, encode_infer_response
from router.validation import validate_inputs

CFG = ModelConfig.model_validate({
    "name": "m", "max_batch_size": 4, "max_input_bytes": 4096,
    "inputs": [{"name": "x", "dtype": "FP32", "shape": [3]},
               {"name": "ids", "dtype": "INT64", "shape": [-1]}],
    "outputs": [{"name": "y", "dtype": "FP32", "shape": [2]}],
})


def _ok_inputs(n=2):
    return {"x": np.zeros((n, 3), np.float32), "ids": np.zeros((n, 5), np.int64)}


def test_validation_accepts_and_casts_safely():
    out = validate_inputs(CFG, {"x": np.zeros((2, 3), np.float64),
                                "ids": np.ones((2, 7), np.int32)})
    assert out["x"].dtype == np.float32 and out["ids"].dtype == np.int64


@pytest.mark.parametrize("inputs, field, needle", [
    ({"x": np.zeros((1, 3), np.float32)}, "inputs.ids", "missing input"),
    ({**_ok_inputs(), "z": np.zeros((2, 1))}, "inputs.z", "unknown input"),
    ({"x": np.zeros((2, 3), np.float32), "ids": np.zeros((2, 5), np.float32)}, "inputs.ids",
     "expected dtype INT64"),
    ({"x": np.zeros((2, 4), np.float32), "ids": np.zeros((2, 5), np.int64)}, "inputs.x",
     "expected shape [batch, 3], got [2, 4]"),
    ({"x": np.zeros((3,), np.float32), "ids": np.zeros((2, 5), np.int64)}, "inputs.x",
     "expected rank 2"),
    ({"x": np.zeros((5, 3), np.float32), "ids": np.zeros((5, 5), np.int64)}, "inputs.x",
     "exceeds max_batch_size 4"),
    ({"x": np.zeros((2, 3), np.float32), "ids": np.zeros((3, 5), np.int64)}, "inputs.ids",
     "differs from the other inputs"),
    ({"x": np.full((1, 3), np.nan, np.float32), "ids": np.zeros((1, 5), np.int64)}, "inputs.x",
     "finite"),
])
def test_validation_errors_name_field_and_expectation(inputs, field, needle):
    with pytest.raises(InvalidRequest) as e:
        validate_inputs(CFG, inputs)
    assert e.value.field == field and needle in e.value.message


def test_oversized_payload_is_413():
    with pytest.raises(PayloadTooLarge):
        validate_inputs(CFG, {"x": np.zeros((4, 3), np.float32),
                              "ids": np.zeros((4, 200), np.int64)})


def _body(**extra):
    doc = {"id": "r1", "inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                   "data": [[1, 2, 3]]}]}
    doc.update(extra)
    return json.dumps(doc).encode()


def test_decode_json_and_binary_tensors():
    d = decode_infer_request(_body(parameters={"caller": "c"}), None)
    assert d.request_id == "r1" and d.parameters == {"caller": "c"}
    np.testing.assert_array_equal(d.inputs["x"], [[1, 2, 3]])
    raw = np.arange(6, dtype=np.float32).reshape(2, 3)
    head = json.dumps({"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                                   "parameters": {"binary_data_size": raw.nbytes}}],
                       "parameters": {"binary_data_output": True}}).encode()
    d = decode_infer_request(head + raw.tobytes(), len(head))
    np.testing.assert_array_equal(d.inputs["x"], raw)
    assert d.binary_all


@pytest.mark.parametrize("body, field", [
    (b"{", "body"),
    (b"[]", "body"),
    (json.dumps({"inputs": "x"}).encode(), "inputs"),
    (json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                             "data": [1]}]}).encode(),
     "inputs.x.data"),
    (json.dumps({"inputs": [{"name": "x", "shape": [-1], "datatype": "FP32",
                             "data": [1]}]}).encode(),
     "inputs.x.shape"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "STRING",
                             "data": [1]}]}).encode(),
     "inputs.x.datatype"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "INT32",
                             "data": [1.5]}]}).encode(),
     "inputs.x.data"),
    (json.dumps({"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}).encode(),
     "inputs.x.data"),
])
def test_decode_errors_name_the_field(body, field):
    with pytest.raises(InvalidRequest) as e:
        decode_infer_request(body, None)
    assert e.value.field == field


def test_binary_size_mismatch_and_trailing_bytes():
    head = json.dumps({"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 8}}]}).encode()
    with pytest.raises(InvalidRequest, match="binary_data_size"):
        decode_infer_request(head + b"\0" * 8, len(head))
    with pytest.raises(InvalidRequest, match="trailing bytes"):
        decode_infer_request(_body() + b"xx", len(_body()))


def test_encode_json_and_binary_round_trip():
    y = np.array([[0.5, 1.5]], np.float32)
    resp = InferenceResponse(request_id="r1", model="m", version="2", outputs={"y": y},
                             served_by="cpu:m@2", degraded=True, reason="timeout",
                             timings=Timings(queue_ms=1, compute_ms=2, total_ms=3))
    payload, headers = encode_infer_response(resp, decode_infer_request(_body(), None))
    doc = json.loads(payload)
    assert doc["outputs"][0] == {"name": "y", "datatype": "FP32", "shape": [1, 2],
                                 "data": [0.5, 1.5]}
    assert doc["parameters"]["degraded"] is True and doc["parameters"]["reason"] == "timeout"
    binary = decode_infer_request(
        _body(outputs=[{"name": "y", "parameters": {"binary_data": True}}]), None)
    payload, headers = encode_infer_response(resp, binary)
    n = int(headers["Inference-Header-Content-Length"])
    head = json.loads(payload[:n])
    assert head["outputs"][0]["parameters"]["binary_data_size"] == 8
    np.testing.assert_array_equal(np.frombuffer(payload[n:], np.float32), y.ravel())
    with pytest.raises(InvalidRequest, match="outputs.nope"):
        encode_infer_response(resp, decode_infer_request(_body(outputs=[{"name": "nope"}]), None))


def _decode_one(datatype: str, text: str) -> np.ndarray:
    head = '{"inputs":[{"name":"x","shape":[1],"datatype":"' + datatype + '","data":['
    body = (head + text + "]}]}").encode()
    return decode_infer_request(body, None).inputs["x"]


def test_decode_reads_numbers_as_the_standard_library_does():
    # orjson reads the common case; what it refuses (NaN literals) takes json's path
    assert _decode_one("INT64", "9007199254740993").tolist() == [9007199254740993]  # exact
    assert np.isnan(_decode_one("FP64", "NaN")[0])
    # an integer beyond 64 bits reads as a float: refused for an integer tensor, named
    with pytest.raises(InvalidRequest, match="expected dtype INT64") as e:
        _decode_one("INT64", str(2**70))
    assert e.value.field == "inputs.x.data"
    assert _decode_one("FP32", str(2**70))[0] == np.float32(2.0**70)
    with pytest.raises(InvalidRequest, match="malformed JSON") as e:
        decode_infer_request(b'{"inputs": [', None)
    assert e.value.field == "body"


def test_encode_keeps_non_finite_outputs_as_json_literals():
    y = np.array([[np.nan, np.inf]], np.float32)
    resp = InferenceResponse(request_id="r1", model="m", version="2", outputs={"y": y},
                             served_by="cpu:m@2", timings=Timings())
    payload, _ = encode_infer_response(resp, decode_infer_request(_body(), None))
    assert b"[NaN,Infinity]" in payload  # not null: clients read them back as floats
    finite = InferenceResponse(request_id="r1", model="m", version="2",
                               outputs={"y": np.array([[1e-5, 0.25]], np.float32)},
                               served_by="cpu:m@2", timings=Timings())
    payload, _ = encode_infer_response(finite, decode_infer_request(_body(), None))
    assert json.loads(payload)["outputs"][0]["data"] == [np.float32(1e-5).item(), 0.25]


@pytest.mark.parametrize("values", [
    [1.0, -np.inf], [np.inf, -np.inf], [0.0] * 300 + [np.nan], [1e308, 1e308], [0.5] * 300])
def test_encode_finds_non_finite_outputs_of_any_size(values):
    y = np.array([values], np.float64)
    resp = InferenceResponse(request_id="r1", model="m", version="2", outputs={"y": y},
                             served_by="cpu:m@2", timings=Timings())
    payload, _ = encode_infer_response(resp, decode_infer_request(_body(), None))
    assert b"null" not in payload  # NaN and infinities stay literals, never null
    back = json.loads(payload)["outputs"][0]["data"]  # the standard library reads NaN back
    assert np.array_equal(np.array(back), y.reshape(-1), equal_nan=True)


def test_encode_takes_numpy_scalars_in_labels():
    resp = InferenceResponse.model_construct(  # as the pipeline builds it: no validation
        request_id="r1", model="m", version="2", outputs={"y": np.array([[1.0, 2.0]], np.float32)},
        served_by="cpu:m@2", degraded=False, reason=None, cache="semantic",
        similarity=np.float64(0.93), timings=Timings(), route=None, quota=None,
        caller="anonymous", caller_verified=False)
    payload, _ = encode_infer_response(resp, decode_infer_request(_body(), None))
    assert json.loads(payload)["parameters"]["similarity"] == 0.93
