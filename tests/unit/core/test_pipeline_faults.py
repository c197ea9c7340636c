"""Caller quotas and load shedding through the real pipeline, in-process (no Ray).

The pipeline runs over a ``LocalPoolClient`` and a real ``ModelHost`` serving the small demo
repository on the CPU, so the answers come from real models; only Ray is left out. Every test
counts requests sent and outcomes received (answer or typed error) and asserts they are equal.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fallbacks import CallerQuotas, QuotaConfig
from policies.priority import Priority
from router.errors import InvalidRequest, QuotaExceeded
from router.pipeline import Pipeline, PipelineConfig
from router.schemas import InferenceRequest
from tests.support.pipeline import local_pipeline as _pipeline


def _request(i: int, **kw) -> InferenceRequest:
    x = np.full((1, 64), float(i % 17), dtype=np.float32)
    return InferenceRequest(model="digits-small", inputs={"pixels": x}, **kw)


async def _send_all(pipe: Pipeline, requests: list[InferenceRequest]) -> list:
    """Answers or exceptions, one per request (gather keeps the order)."""
    await pipe.catalog.refresh()
    return await asyncio.gather(*(pipe.infer(r) for r in requests), return_exceptions=True)


async def test_over_concurrency_caller_gets_429_and_others_are_served(host):
    quotas = CallerQuotas(QuotaConfig(callers={"greedy": {"max_concurrency": 2}}))
    pipe = _pipeline(host, quotas=quotas)
    sent = [_request(i, caller="greedy") for i in range(10)]
    sent += [_request(i, caller="polite") for i in range(10)]
    outcomes = await _send_all(pipe, sent)
    assert len(outcomes) == len(sent)  # every request got exactly one outcome

    greedy, polite = outcomes[:10], outcomes[10:]
    rejected = [o for o in greedy if isinstance(o, QuotaExceeded)]
    served = [o for o in greedy if not isinstance(o, BaseException)]
    assert len(served) == 2 and len(rejected) == 8, greedy
    assert all(e.status_code == 429 and e.field == "caller" for e in rejected)
    assert "concurrency limit" in rejected[0].message
    assert all(not isinstance(o, BaseException) and o.served_by == "cpu:digits-small@1"
               and not o.degraded for o in polite), polite
    # slots came back: nothing leaked, the caller is served again once its burst is over
    assert quotas.in_flight("greedy") == 0 and quotas.in_flight("polite") == 0
    again = await pipe.infer(_request(1, caller="greedy"))
    assert again.served_by == "cpu:digits-small@1"


async def test_quota_slot_is_released_when_the_request_fails(host):
    quotas = CallerQuotas(QuotaConfig(default={"max_concurrency": 1}))
    pipe = _pipeline(host, quotas=quotas)
    await pipe.catalog.refresh()
    bad = InferenceRequest(model="digits-small", inputs={"pixels": np.zeros((1, 3))}, caller="c")
    for _ in range(3):  # a leaked slot would turn the 2nd attempt into a 429
        with pytest.raises(InvalidRequest):
            await pipe.infer(bad)
    assert quotas.in_flight("c") == 0
    assert (await pipe.infer(_request(0, caller="c"))).served_by == "cpu:digits-small@1"


async def test_rate_limited_caller_gets_429_naming_the_rate(host):
    quotas = CallerQuotas(QuotaConfig(callers={"bursty": {"rate_per_s": 0.01, "burst": 3}}))
    pipe = _pipeline(host, quotas=quotas)
    outcomes = await _send_all(pipe, [_request(i, caller="bursty") for i in range(8)])
    assert len(outcomes) == 8
    served = [o for o in outcomes if not isinstance(o, BaseException)]
    rejected = [o for o in outcomes if isinstance(o, QuotaExceeded)]
    assert len(served) == 3 and len(rejected) == 5
    assert "rate limit" in rejected[0].message and rejected[0].field == "caller"


async def test_overload_sheds_low_classes_first_to_labelled_fallbacks(host):
    # capacity 2: interactive is shed once 2 requests are in flight, realtime only at 3
    pipe = _pipeline(host, config=PipelineConfig(pool_capacity=2))
    interactive = [_request(i, priority=Priority.INTERACTIVE) for i in range(10)]
    outcomes = await _send_all(pipe, interactive)
    assert len(outcomes) == 10
    assert not any(isinstance(o, BaseException) for o in outcomes), outcomes
    served = [o for o in outcomes if not o.degraded]
    shed = [o for o in outcomes if o.degraded]
    assert served and all(o.served_by == "cpu:digits-small@1" for o in served)
    assert len(shed) >= 8 - len(served) and shed
    for o in shed:  # digits-small's chain is a static default: labelled, never an error
        assert o.served_by == "default" and o.reason == "shed: overload:interactive"
        np.testing.assert_array_equal(o.outputs["logits"], np.zeros((1, 10), dtype=np.float32))
    assert pipe._in_flight[("cpu", Priority.INTERACTIVE)] == 0  # no leaked in-flight count

    # the same burst in the realtime class is admitted further (its ceiling is 1.5x capacity)
    realtime = await _send_all(pipe, [_request(i, priority=Priority.REALTIME) for i in range(10)])
    assert len(realtime) == 10
    assert sum(not o.degraded for o in realtime) > len(served)
    assert {o.reason for o in realtime if o.degraded} <= {"shed: overload:realtime"}
