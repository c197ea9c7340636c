"""Where an answer was computed travels typed: ``InferenceResponse.pool``, never parsed back out
of ``served_by`` (whose prefix is a fallback step's kind when a fallback model answered)."""

from __future__ import annotations

import numpy as np

from alerting.telemetry import Telemetry
from policies.priority import Priority
from router._private.recorders import TelemetryRecorder
from router.cache import ResultCache
from router.schemas import InferenceRequest, InferenceResponse, Timings
from tests.support.models import assert_as_validated
from tests.support.pipeline import local_pipeline


def _queue_points(t: Telemetry) -> list[dict]:
    return [p.labels for p in t.queue_delays.snapshot()]


def test_queue_delay_is_labelled_with_the_pool_that_ran_the_model() -> None:
    t = Telemetry.in_memory()
    req = InferenceRequest(model="digits-large", inputs={"pixels": np.zeros((1, 64))},
                           priority=Priority.BATCH)
    # a fallback model answered: served_by names the step ("cheaper"), the pool is the CPU pool
    resp = InferenceResponse(request_id=req.request_id, model="digits-large",
                             served_by="cheaper:digits-small@1", degraded=True, reason="timeout",
                             pool="cpu", timings=Timings(queue_ms=2.0))
    TelemetryRecorder(t).record(req, resp, None, 0.01)
    assert _queue_points(t) == [{"model": "digits-large", "priority": "batch", "device": "cpu"}]


def test_no_queue_delay_without_a_pool() -> None:
    t = Telemetry.in_memory()
    req = InferenceRequest(model="m", inputs={"x": np.zeros((1, 2))})
    resp = InferenceResponse(request_id=req.request_id, model="m", served_by="rules:r",
                             degraded=True, reason="timeout", timings=Timings(queue_ms=2.0))
    TelemetryRecorder(t).record(req, resp, None, 0.01)
    assert _queue_points(t) == []


async def test_an_answer_names_its_pool_and_a_cache_hit_does_not(host) -> None:
    cache = ResultCache()
    pipe = local_pipeline(host, cache=cache)
    await pipe.catalog.refresh()
    req = InferenceRequest(model="digits-small", inputs={"pixels": np.full((1, 64), 3.0)})
    try:
        computed = await pipe.infer(req)
        hit = await pipe.infer(req)
    finally:
        await cache.close()
    assert (computed.cache, computed.pool, computed.served_by) == ("miss", "cpu",
                                                                   "cpu:digits-small@1")
    assert (hit.cache, hit.pool, hit.served_by) == ("memory", None, "cpu:digits-small@1")


async def test_an_answer_is_built_as_validation_would(host) -> None:
    """The pipeline builds its answers unchecked (``router.schemas.unchecked``): computed, hit
    and degraded ones must hold what the validated constructor would have made of them."""
    cache = ResultCache()
    pipe = local_pipeline(host, cache=cache)
    await pipe.catalog.refresh()
    req = InferenceRequest(model="digits-small", inputs={"pixels": np.full((1, 64), 2.0)})
    shed = InferenceRequest(model="digits-small", inputs={"pixels": np.full((1, 64), 4.0)},
                            shed_reason="shed: test", caller="team-a")
    try:
        answers = [await pipe.infer(req), await pipe.infer(req), await pipe.infer(shed)]
    finally:
        await cache.close()
    assert [a.cache for a in answers] == ["miss", "memory", "miss"]
    assert answers[2].degraded and answers[2].reason
    for a in answers:
        assert_as_validated(a)
