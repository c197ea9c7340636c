"""Regression tests from the hardening probe, against the real HTTP app in-process.

Every bad input is a 4xx naming the field, in the app's {"error", "type", "field"} shape.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tests.support.app import ADMIN_KEY
from tests.support.errors import assert_error
from tests.support.v2 import digits_body as body

pytestmark = pytest.mark.asyncio(loop_scope="package")

def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("where", ["body", "data", "parameters"])
async def test_deeply_nested_json_is_400(client, where):
    deep = nested(10_000)
    raw = {"body": deep,
           "data": '{"inputs":[{"name":"pixels","shape":[1,64],"datatype":"FP32","data":'
                   + deep + '}]}',
           "parameters": '{"inputs":[],"parameters":{"text":' + deep + '}}'}[where]
    r = await client.post("/v2/models/digits-small/infer", content=raw,
                          headers={"content-type": "application/json"})
    assert_error(r, 400, "body")


@pytest.mark.parametrize("params", [[1, 2], "x", 3])
async def test_tensor_parameters_must_be_objects(client, params):
    doc = body()
    doc["inputs"][0]["parameters"] = params
    assert_error(await client.post("/v2/models/digits-small/infer", json=doc), 400,
                 "inputs.pixels.parameters")
    doc = body()
    doc["outputs"] = [{"name": "logits", "parameters": params}]
    assert_error(await client.post("/v2/models/digits-small/infer", json=doc), 400,
                 "outputs.logits.parameters")
    doc = body()
    doc["parameters"] = params
    assert_error(await client.post("/v2/models/digits-small/infer", json=doc), 400,
                 "parameters")


async def test_huge_binary_shape_is_400(client):
    head = json.dumps({"inputs": [{"name": "pixels", "shape": [2**32, 2**32], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 256}}]}).encode()
    r = await client.post("/v2/models/digits-small/infer", content=head + bytes(256),
                          headers={"Inference-Header-Content-Length": str(len(head))})
    assert_error(r, 400, "inputs.pixels.parameters.binary_data_size")
    r = await client.post("/v2/models/digits-small/infer",
                          json=body(shape=(2**32, 2**32)))
    assert_error(r, 400, "inputs.pixels.data")


async def test_non_ascii_digit_header_is_400(client):
    r = await client.post("/v2/models/digits-small/infer", json=body(),
                          headers={"Inference-Header-Content-Length": "²".encode("latin-1")})
    assert_error(r, 400, "Inference-Header-Content-Length")


@pytest.mark.parametrize("key, value", [
    ("cache_skip_read", "false"), ("cache_skip_write", 1), ("binary_data_output", "false"),
    ("deadline_ms", True), ("deadline_ms", "5"), ("timeout", "x"), ("caller", 7), ("text", []),
])
async def test_no_silent_coercion_of_parameters(client, key, value):
    r = await client.post("/v2/models/digits-small/infer", json=body(**{key: value}))
    assert_error(r, 400, f"parameters.{key}")


async def test_duplicate_inputs_and_route_versions_are_400(client):
    doc = body()
    doc["inputs"].append(dict(doc["inputs"][0]))
    assert_error(await client.post("/v2/models/digits-small/infer", json=doc), 400,
                 "inputs.pixels")
    r = await client.post("/v2/models/digits/versions/1/infer", json=body())
    assert_error(r, 400, "version")


@pytest.mark.parametrize("field, value, named", [
    ("datatype", ["FP32"], "inputs.pixels.datatype"),
    ("datatype", {"a": 1}, "inputs.pixels.datatype"),
    ("name", ["pixels"], "inputs[0].name"),  # no usable name: the tensor's position
    ("shape", {"a": 1}, "inputs.pixels.shape")])
async def test_unhashable_or_mistyped_tensor_fields_are_400(client, field, value, named):
    doc = body()
    doc["inputs"][0][field] = value
    assert_error(await client.post("/v2/models/digits-small/infer", json=doc), 400, named)


@pytest.mark.parametrize("datatype, data", [
    ("UINT8", [300] + [0] * 63), ("INT8", [-200] + [0] * 63), ("BOOL", [5] + [0] * 63),
    ("INT64", [0.5] * 64), ("FP32", [True] * 64),
])
async def test_out_of_range_or_mistyped_values_are_400(client, datatype, data):
    r = await client.post("/v2/models/digits-small/infer", json=body(data, datatype=datatype))
    assert_error(r, 400, "inputs.pixels.data")


async def test_unmatched_paths_methods_and_long_names_use_the_error_shape(client):
    assert_error(await client.get("/nope"), 404, "path")
    assert_error(await client.get("/v2/models/digits-small/infer"), 405)
    assert_error(await client.post("/v2/models/" + "m" * 5000 + "/infer", json=body()), 400,
                 "model")
    assert_error(await client.get("/v2/models/" + "m" * 5000), 400, "model")
    assert_error(await client.get("/v2/models/unknown"), 404, "model")


async def test_openapi_declares_bodies_and_error_responses(client):
    spec = (await client.get("/openapi.json")).json()
    op = spec["paths"]["/v2/models/{name}/infer"]["post"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert "inputs" in schema["properties"] and "$defs" not in json.dumps(schema)
    assert {"400", "404", "413", "429", "503"} <= set(op["responses"])
    err = spec["components"]["schemas"]["ErrorBody"]["properties"]
    assert {"error", "type", "field"} <= set(err)


async def test_stream_validates_before_the_stream_and_sends_json_only(client):
    doc = body()
    doc["outputs"] = [{"name": "nope"}]
    assert_error(await client.post("/v2/models/digits-small/infer_stream", json=doc), 400,
                 "outputs.nope")
    doc["outputs"] = [{"name": "logits", "parameters": {"binary_data": True}}]
    assert_error(await client.post("/v2/models/digits-small/infer_stream", json=doc), 400,
                 "outputs.logits.parameters.binary_data")
    assert_error(await client.post("/v2/models/digits-small/infer_stream",
                                   json=body(binary_data_output=True)), 400,
                 "parameters.binary_data_output")
    r = await client.post("/v2/models/digits-small/infer_stream", json=body())
    assert r.status_code == 200
    events = [e for e in r.text.split("\n\n") if e]
    assert events and all(json.loads(e.removeprefix("data: "))["outputs"] for e in events)


async def test_routes_are_virtual_models(client):
    meta = (await client.get("/v2/models/digits")).json()
    assert meta["name"] == "digits" and meta["platform"] == "timeshare_route"
    assert meta["inputs"][0]["name"] == "pixels" and meta["outputs"][0]["datatype"] == "FP32"
    r = await client.get("/v2/models/digits/ready")
    assert r.status_code == 200 and r.json() == {"ready": True}
    assert (await client.get("/v2/models/digits/versions/1/ready")).status_code == 400


async def test_degraded_answers_keep_the_declared_dtype(client):
    # 1 us leaves no time for the model: the default fallback answers, labelled, as FP32.
    r = await client.post("/v2/models/digits-small/infer",
                          json=body(deadline_ms=0.001, cache_skip_read=True))
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["parameters"]["degraded"] is True
    assert doc["outputs"][0]["datatype"] == "FP32"


async def _unsure_digit(client) -> list[float]:
    """An input the cheap digits model is unsure about (max softmax < the route's 0.9)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = (rng.uniform(0, 1, 64) * rng.uniform(0, 4)).round(2).tolist()
        r = await client.post("/v2/models/digits-small/infer", json=body(x))
        logits = np.array(r.json()["outputs"][0]["data"], dtype=np.float64)
        p = np.exp(logits - logits.max())
        if p.max() / p.sum() < 0.8:
            return x
    raise AssertionError("no low-confidence input found")


async def test_cascade_with_spent_deadline_after_cached_cheap_answer(client, ingress):
    # The cheap answer comes from the cache, escalation then reaches the spill decision with
    # no time left: that was a ValueError (500); it is a decision (spill to the cheap model).
    x = await _unsure_digit(client)
    first = await client.post("/v2/models/digits/infer", json=body(x))
    assert first.status_code == 200, first.text
    assert json.loads(first.json()["parameters"]["route"])["decision"] in ("escalated",
                                                                          "spilled")
    for _ in range(100):  # the spill decision needs the pool's load report
        if ingress._load.get("cpu"):
            break
        await asyncio.sleep(0.05)
    r = await client.post("/v2/models/digits/infer", json=body(x, deadline_ms=0.001))
    assert r.status_code == 200, r.text
    route = json.loads(r.json()["parameters"]["route"])
    assert route["decision"] == "spilled" and r.json()["parameters"]["degraded"] is True


async def test_status_needs_the_operator_key(client):
    assert_error(await client.get("/v2/status"), 401)
    r = await client.get("/v2/status", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200 and "breakers" in r.json()
    # No breaker for a GPU pool on a machine (this app) that has none.
    assert not any(k.endswith("@gpu") for k in r.json()["breakers"])
