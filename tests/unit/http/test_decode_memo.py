"""``router.decode_memo``: repeated cache-hit bodies skip the decode, and nothing else changes."""

from __future__ import annotations

import json
import struct

import httpx
import numpy as np
import pytest

from pool.config import ModelConfig, TensorSpec
from router.decode_memo import DecodeMemo
from router.errors import InvalidRequest
from router.v2 import decode_infer_request
from router.validation import validate_inputs

PIXELS = np.linspace(-1, 1, 64).round(3).tolist()


def body(**params) -> bytes:
    return json.dumps({"id": "r-1", "inputs": [{"name": "pixels", "shape": [1, 64],
                                                "datatype": "FP32", "data": PIXELS}],
                       "parameters": params}).encode()


def same(a, b) -> bool:
    return (a.request_id == b.request_id and a.parameters == b.parameters
            and a.outputs == b.outputs and a.binary_all == b.binary_all
            and a.inputs.keys() == b.inputs.keys()
            and all(a.inputs[k].dtype == b.inputs[k].dtype
                    and np.array_equal(a.inputs[k], b.inputs[k]) for k in a.inputs))


def test_only_exact_cache_hits_are_remembered():
    memo, raw = DecodeMemo(), body()
    decoded = memo.decode(raw, None)
    for tier in ("miss", "off", "bypass", "semantic"):
        memo.answered(raw, None, decoded, tier)
    assert len(memo) == 0
    memo.answered(raw, None, decoded, "memory")
    memo.answered(raw, None, decoded, "redis")  # already held: one entry
    assert len(memo) == 1


def test_a_remembered_body_decodes_as_before_with_read_only_arrays():
    memo, raw = DecodeMemo(), body(priority="realtime")
    memo.answered(raw, None, decode_infer_request(raw, None), "memory")
    first, second = memo.decode(raw, None), memo.decode(raw, None)
    assert same(first, decode_infer_request(raw, None))
    with pytest.raises(ValueError, match="read-only"):  # no caller can change the entry
        first.inputs["pixels"][0, 0] = 99.0
    first.parameters["priority"] = "batch"  # one caller's dicts are its own
    first.inputs.pop("pixels")
    assert same(second, decode_infer_request(raw, None))
    assert same(memo.decode(raw, None), decode_infer_request(raw, None))


def test_a_remembered_body_that_computes_gets_writable_inputs():
    memo, raw = DecodeMemo(), body()
    memo.answered(raw, None, decode_infer_request(raw, None), "memory")
    shared = memo.decode(raw, None).inputs
    cfg = ModelConfig(name="m", inputs=[TensorSpec(name="pixels", dtype="FP32",
                                                   shape=[64])],
                      outputs=[TensorSpec(name="y", dtype="FP32", shape=[1])])
    valid = validate_inputs(cfg, shared)
    assert valid["pixels"].flags.writeable and valid["pixels"].flags.c_contiguous
    valid["pixels"][0, 0] = 99.0  # a model computing in place changes only its own copy
    assert same(memo.decode(raw, None), decode_infer_request(raw, None))


def test_binary_bodies_are_keyed_by_their_header_length_too():
    head = json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "FP32",
                                   "parameters": {"binary_data_size": 8}}]}).encode()
    raw = head + struct.pack("<2f", 1.5, -2.0)
    memo = DecodeMemo()
    memo.answered(raw, len(head), decode_infer_request(raw, len(head)), "memory")
    assert memo.decode(raw, len(head)).inputs["x"].tolist() == [1.5, -2.0]
    with pytest.raises(InvalidRequest):  # the same bytes read as all-JSON: not the entry
        memo.decode(raw, None)


def test_bounded_in_entries_and_body_size():
    memo = DecodeMemo(max_entries=3, max_body_bytes=len(body(k=0)) + 8)
    bodies = [body(k=i) for i in range(5)]
    for raw in bodies:
        memo.answered(raw, None, decode_infer_request(raw, None), "memory")
    assert len(memo) == 3
    assert memo._entries.keys() == {(None, raw) for raw in bodies[2:]}  # oldest out first
    big = body(k=0, pad="x" * 64)
    memo.answered(big, None, decode_infer_request(big, None), "memory")
    assert (None, big) not in memo._entries
    with pytest.raises(ValueError):
        DecodeMemo(max_entries=-1)


def test_bad_bodies_still_raise_naming_the_field():
    with pytest.raises(InvalidRequest) as e:
        DecodeMemo().decode(b'{"inputs": []}', None)
    assert e.value.field == "inputs"


@pytest.mark.asyncio(loop_scope="package")
async def test_the_served_app_answers_repeated_hits_from_the_memo_unchanged(ingress):
    app = ingress.__serve_build_asgi_app__()
    raw = body(deadline_ms=4000)  # a body no other test of the package sends
    path = "/v2/models/digits-small/infer"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://ts") as c:
        answers = [await c.post(path, content=raw) for _ in range(4)]
    docs = [r.json() for r in answers]
    assert [r.status_code for r in answers] == [200] * 4
    assert [d["parameters"]["cache"] for d in docs] == ["miss", "memory", "memory", "memory"]
    memo = ingress._infer_endpoint.memo
    assert (None, raw) in memo._entries  # remembered after the first hit, used after
    for d in docs:
        assert d["id"] == "r-1" and d["outputs"] == docs[0]["outputs"]
        assert d["parameters"]["caller"] == "anonymous" and not d["parameters"]["degraded"]
