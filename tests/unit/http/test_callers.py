"""Caller identity: from the caller key when the app has caller keys; never from the body."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from router._private.callers import digest as _digest
from router._private.callers import identify
from router.errors import Forbidden, Unauthorized
from router.schemas import InferenceRequest
from tests.support.errors import assert_error
from tests.support.v2 import digits_body as body

pytestmark = pytest.mark.asyncio(loop_scope="package")

URL = "/v2/models/digits-small/infer"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_right_key_sets_the_caller(client):
    r = await client.post(URL, json=body(), headers=bearer("key-finance"))
    assert r.status_code == 200, r.text
    p = r.json()["parameters"]
    assert (p["caller"], p["caller_verified"]) == ("team-finance", True)
    same = await client.post(URL, json=body(caller="team-finance"), headers={
        "X-API-Key": "key-finance"})
    assert same.json()["parameters"]["caller"] == "team-finance"


async def test_declared_caller_that_is_not_the_keys_is_403(client):
    r = await client.post(URL, json=body(caller="team-search"), headers=bearer("key-finance"))
    assert_error(r, 403, "caller")
    assert_error(await client.post(URL, json=body(caller="team-finance")), 403, "caller")
    assert_error(await client.post(URL, json=body(), headers=bearer("nope")), 401, "caller_key")


async def test_anonymous_is_labelled_in_the_response_and_the_call_log(client, ingress):
    doc = body()
    doc["id"] = "team-finance"  # a client-chosen id is echoed, never taken as an identity
    r = await client.post(URL, json=doc)
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "team-finance"
    p = r.json()["parameters"]
    assert (p["caller"], p["caller_verified"]) == ("anonymous", False)
    path = ingress.settings.call_log.path
    for _ in range(100):  # the call log writes in the background
        lines = [json.loads(x) for x in open(path)] if ingress.call_log.pending == 0 else []
        mine = [x for x in lines if x["request_id"] == "team-finance"]
        if mine:
            break
        await asyncio.sleep(0.05)
    assert mine and mine[-1]["caller"] == "anonymous" and mine[-1]["caller_verified"] is False


def _req(**kw) -> InferenceRequest:
    return InferenceRequest(model="m", inputs={"x": np.zeros((1, 2))}, **kw)


async def test_handle_requests_are_identified_the_same_way():
    keys = {_digest("k1"): "team-a"}
    got = identify(_req(caller_key="k1"), keys)
    assert (got.caller, got.caller_verified, got.caller_key) == ("team-a", True, None)
    with pytest.raises(Forbidden):
        identify(_req(caller="team-b", caller_key="k1"), keys)
    with pytest.raises(Unauthorized):
        identify(_req(caller_key="k2"), keys)
    # A handle caller cannot claim to be verified, with or without caller keys.
    assert identify(_req(caller_verified=True), keys).caller_verified is False
    assert identify(_req(caller="x", caller_verified=True), None).caller_verified is False
    assert identify(_req(caller="x"), None).caller == "x"
