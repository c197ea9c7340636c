"""Property test: whatever the v2 body, the real HTTP app answers without a 5xx, and every error
is in the app's {"error", "type", "field"} shape.

Bodies are drawn around the valid shape (so the decoder, the validator and the pipeline are all
reached) with wrong types, values, nesting and sizes mixed in; bounded by ``max_examples``.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.asyncio(loop_scope="package")

MODELS = ["digits-small", "digits-small", "digits", "digits", "iris-mlp1x16", "nope", "x" * 300]
NAMES = ["pixels", "features", "logits", "", "x"]

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))
junk = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                 st.dictionaries(st.text(max_size=6), c,
                                                                 max_size=4)), max_leaves=12)
INPUTS = {"digits-small": ("pixels", 64), "digits": ("pixels", 64),
          "iris-mlp1x16": ("features", 4)}
EDGES = st.one_of(junk, st.sampled_from([
    [], {}, "", 0, -1, 2**32, 2**63, True, False, 1e308, "false", "²", [2**32, 2**32], [-1],
    [[1.0] * 4] * 2, "realtime", "BOOL", "UINT8", "INT8", [300], [-200], [5], [0.5]]))


@st.composite
def bodies(draw, model: str):
    """A valid body for ``model``, then a few fields replaced by edge cases or junk."""
    name, width = INPUTS.get(model, ("pixels", 64))
    rows = draw(st.integers(1, 3))
    values = draw(st.lists(st.floats(-20, 20, allow_nan=False), min_size=rows * width,
                           max_size=rows * width))
    tensor = {"name": name, "shape": [rows, width], "datatype": "FP32", "data": values}
    doc: dict = {"inputs": [tensor]}
    if draw(st.booleans()):
        doc["outputs"] = [{"name": "logits", "parameters": {"binary_data": False}}]
    doc["parameters"] = draw(params)
    for _ in range(draw(st.integers(0, 2))):
        where = draw(st.sampled_from(["tensor", "tensor.parameters", "body", "parameters",
                                      "outputs", "extra_input"]))
        value = draw(EDGES)
        if where == "tensor":
            key = draw(st.sampled_from(["name", "shape", "datatype", "data", "parameters"]))
            tensor[key] = value
        elif where == "tensor.parameters":
            tensor["parameters"] = {"binary_data_size": value}
        elif where == "body":
            doc[draw(st.sampled_from(["inputs", "outputs", "parameters", "id", "extra"]))] = value
        elif where == "parameters":
            doc["parameters"] = {**(doc["parameters"] if isinstance(doc["parameters"], dict)
                                    else {}), draw(st.sampled_from(PARAM_KEYS)): value}
        elif where == "outputs":
            doc["outputs"] = [{"name": draw(st.sampled_from(NAMES)), "parameters": value}]
        else:
            doc["inputs"] = [tensor, dict(tensor, name=draw(st.sampled_from(NAMES)))]
    return doc


PARAM_KEYS = ["priority", "deadline_ms", "caller", "text", "cache_skip_read",
              "cache_skip_write", "binary_data_output", "timeout", "other"]
params = st.dictionaries(
    st.sampled_from(PARAM_KEYS),
    st.one_of(st.sampled_from(["realtime", "batch", "anonymous"]), st.floats(1, 5000),
              st.booleans()), max_size=3)


def asked_deadline_ms(doc) -> float | None:
    """The deadline a body asks for (``deadline_ms``, else Triton's ``timeout`` in µs), if any."""
    p = doc.get("parameters") if isinstance(doc, dict) else None
    if not isinstance(p, dict):
        return None
    number = [v for v in (p.get("deadline_ms"),) if isinstance(v, int | float)
              and not isinstance(v, bool)]
    timeout = p.get("timeout")
    if not number and isinstance(timeout, int | float) and not isinstance(timeout, bool) \
            and timeout > 0:
        number = [timeout / 1000.0]
    return float(number[0]) if number else None


def check(r, *, tight_deadline: bool = False) -> None:
    """No 5xx and one error shape. The one 5xx a valid body may get is 504 DeadlineExceeded for
    a deadline it chose too short to meet (``timeout: 1.0`` is 1 µs), where no fallback answers:
    that is the contract, not a crash."""
    if tight_deadline and r.status_code == 504:
        assert r.json().get("type") == "DeadlineExceeded", r.text[:500]
    else:
        assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        doc = r.json()
        assert isinstance(doc.get("error"), str) and isinstance(doc.get("type"), str), doc
        assert set(doc) <= {"error", "type", "field", "ready"}, doc


@settings(max_examples=500, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data(), model=st.sampled_from(MODELS),
       route=st.sampled_from(["infer", "infer", "infer_stream", "versions/1/infer",
                              "versions/x/infer"]))
async def test_v2_body_fuzz_no_5xx_and_one_error_shape(client, data, model, route):
    doc = data.draw(bodies(model))
    r = await client.post(f"/v2/models/{model}/{route}", content=json.dumps(doc, allow_nan=True),
                          headers={"content-type": "application/json"})
    asked = asked_deadline_ms(doc)
    check(r, tight_deadline=asked is not None and asked < 200.0)


@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=256), header=st.one_of(st.none(), st.text(max_size=6).filter(
    lambda s: all(32 <= ord(c) < 256 for c in s))))
async def test_v2_raw_bytes_fuzz(client, raw, header):
    headers = {} if header is None else {"Inference-Header-Content-Length":
                                         header.encode("latin-1")}
    check(await client.post("/v2/models/digits-small/infer", content=raw, headers=headers))
