"""``request_from_v2`` builds the common request unchecked (``router.schemas.unchecked``): it must
hold what the validated constructor would make of it, and everything pydantic does check still
goes through pydantic, with the same errors."""

from __future__ import annotations

import json

import pytest

from policies.priority import Priority
from router.errors import InvalidRequest
from router.http_infer import request_from_v2
from router.v2 import decode_infer_request
from tests.support.models import assert_as_validated


def _decoded(**parameters):
    body = {"inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 4],
                        "data": [1.0, 2.0, 3.0, 4.0]}]}
    if parameters:
        body["parameters"] = parameters
    return decode_infer_request(json.dumps(body).encode(), None)


@pytest.mark.parametrize("parameters", [
    {},
    {"deadline_ms": 250},
    {"timeout": 40_000, "text": "hello", "cache_skip_read": True},
    {"cache_skip_write": True, "deadline_ms": 1e9},
])
def test_a_plain_request_is_built_as_validation_would(parameters) -> None:
    decoded = _decoded(**parameters)
    req = request_from_v2("digits-small", "2", decoded, caller_key="k", arrival_s=12.5,
                          shed_reason="shed: test")
    assert_as_validated(req)
    assert (req.model, req.version, req.caller_key, req.arrival_s, req.shed_reason) == (
        "digits-small", "2", "k", 12.5, "shed: test")
    assert req.inputs is not decoded.inputs  # a remembered decoding is never shared mutable
    assert req.inputs["pixels"] is decoded.inputs["pixels"]


def test_a_request_id_is_kept_and_one_is_made_when_absent() -> None:
    body = {"id": "abc-1", "inputs": [{"name": "x", "datatype": "INT64", "shape": [1],
                                       "data": [3]}]}
    with_id = request_from_v2("m", None, decode_infer_request(json.dumps(body).encode(), None))
    assert with_id.request_id == "abc-1"
    a, b = (request_from_v2("m", None, _decoded()) for _ in range(2))
    assert a.request_id and b.request_id and a.request_id != b.request_id


def test_what_pydantic_checks_still_goes_through_it() -> None:
    req = request_from_v2("m", None, _decoded(priority="batch", caller="team-a"))
    assert (req.priority, req.caller) == (Priority.BATCH, "team-a")
    assert_as_validated(req)
    with pytest.raises(InvalidRequest) as e:
        request_from_v2("m", None, _decoded(deadline_ms=-5))
    assert e.value.field == "parameters.deadline_ms"
    with pytest.raises(InvalidRequest) as e:
        request_from_v2("m", None, _decoded(caller="x" * 200))
    assert e.value.field == "parameters.caller"
    with pytest.raises(InvalidRequest) as e:
        request_from_v2("m", None, _decoded(priority="urgent"))
    assert e.value.field == "parameters.priority"
    with pytest.raises(InvalidRequest) as e:
        request_from_v2("", None, _decoded())
    assert e.value.field == "parameters.model"


def test_a_transport_deadline_caps_the_request() -> None:
    req = request_from_v2("m", None, _decoded(deadline_ms=900), max_deadline_ms=300)
    assert req.deadline_ms == 300.0
    assert_as_validated(req)
