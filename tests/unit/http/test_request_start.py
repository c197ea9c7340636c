"""A front proxy's ``X-Request-Start`` through the real app: the wait in front of the edge
counts against the request's deadline (``router.front_stamp``, ``router.edge``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.support.app import ADMIN_KEY

pytestmark = pytest.mark.asyncio(loop_scope="package")

PATH = "/v2/models/digits-small/infer"
BODY = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                    "data": np.linspace(-1, 1, 64).round(3).tolist()}],
        "parameters": {"cache_skip_read": True, "cache_skip_write": True, "deadline_ms": 2000}}


async def post(client, stamp: str | None):
    headers = {} if stamp is None else {"X-Request-Start": stamp}
    r = await client.post(PATH, json=BODY, headers=headers)
    return r.status_code, r.json()


async def test_a_request_stamped_past_its_deadline_gets_its_labelled_fallback(client) -> None:
    status, fresh = await post(client, f"t={time.time() - 0.05:.6f}")
    assert status == 200 and not fresh["parameters"].get("degraded")
    # waited 2.5 s in front of a 2 s deadline (ms since the epoch): not run, answered labelled
    status, late = await post(client, f"t={int((time.time() - 2.5) * 1000)}")
    params = late["parameters"]
    assert status == 200 and params["degraded"] is True, late
    assert params["served_by"] != "digits-small" and params["reason"] == "expired", late
    assert [o["datatype"] for o in late["outputs"]] == [o["datatype"] for o in fresh["outputs"]]


async def test_an_unusable_stamp_never_costs_the_request(client) -> None:
    for stamp in ("t=later", f"t={time.time() - 3600:.3f}", f"t={time.time() + 60:.3f}"):
        status, answer = await post(client, stamp)
        assert status == 200 and not answer["parameters"].get("degraded"), (stamp, answer)


async def test_the_operator_sees_ignored_stamps_in_the_status(client) -> None:
    async def ignored() -> int:
        status = (await client.get("/v2/status", headers={"X-API-Key": ADMIN_KEY})).json()
        own = status["ingress"]["replicas"][status["replica"]]  # the answering replica's view
        return own["edge"].get("request_start:ignored", 0)

    before = await ignored()
    assert (await post(client, "t=yesterday"))[0] == 200
    assert await ignored() == before + 1
