"""The request pipeline in-process (no Ray): real models, real device workers, real cache."""

from __future__ import annotations

import numpy as np
import pytest

from deploy.demo_data import load_splits
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository
from router.cache import CacheSettings, ResultCache
from router.catalog import ModelCatalog
from router.pipeline import Pipeline, PipelineConfig
from router.pool_client import LocalPoolClient
from router.routes import build_strategy, load_routes
from router.schemas import InferenceRequest

ROUTES = load_routes([
    {"name": "digits", "strategy": "cascade", "cheap": "digits-small", "expensive": "digits-large",
     "threshold": 0.99, "spill": "cheap"},
    {"name": "refine", "strategy": "fast-then-refine", "cheap": "digits-small",
     "expensive": "digits-large", "spill": "none"},
    {"name": "always-large", "strategy": "static", "expensive": "digits-large"},
])


@pytest.fixture
async def pipeline(demo_repo):
    host = ModelHost(ModelRepository(demo_repo, settle_s=0),
                     DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=64 << 20)))
    await host.sync()

    async def fetch():
        return host.index()

    cache = ResultCache(CacheSettings())
    p = Pipeline(ModelCatalog(fetch), {"cpu": LocalPoolClient(host)},
                 config=PipelineConfig(default_deadline_ms=5000), routes=ROUTES,
                 strategies={n: build_strategy(rc) for n, rc in ROUTES.items()}, cache=cache)
    yield p
    await cache.close()
    await host.worker.close()


def _req(model, x, **kw):
    return InferenceRequest(model=model, inputs={"pixels": x}, **kw)


async def test_cascade_escalates_only_unconfident_rows_and_says_why(pipeline):
    split = load_splits("digits")
    decisions = {}
    for i in range(40):
        r = await pipeline.infer(_req("digits", split.test_x[i:i + 1], cache={"skip_read": True}))
        assert r.route.route == "digits" and r.route.strategy == "cascade"
        assert r.route.confidence is not None
        decisions[r.route.decision] = decisions.get(r.route.decision, 0) + 1
        expected = (["digits-small"] if r.route.decision == "cheap"
                    else ["digits-small", "digits-large"])
        assert r.route.models_run == expected
        assert r.served_by.endswith("digits-small@1" if r.route.decision == "cheap"
                                    else "digits-large@1")
        assert (r.route.confidence < 0.99) == (r.route.decision == "escalated")
    assert decisions.get("cheap") and decisions.get("escalated"), decisions


async def test_fast_then_refine_streams_two_answers(pipeline):
    x = load_splits("digits").test_x[:2]
    answers = [a async for a in pipeline.stream(_req("refine", x))]
    assert [a.final for a in answers] == [False, True]
    assert [a.model for a in answers] == ["digits-small", "digits-large"]
    assert answers[1].route.models_run == ["digits-small", "digits-large"]
    assert (await pipeline.infer(_req("refine", x))).model == "digits-large"


async def test_cache_labels_and_degraded_answers_are_not_cached(pipeline):
    x = load_splits("digits").test_x[5:6]
    first = await pipeline.infer(_req("digits-large", x))
    again = await pipeline.infer(_req("digits-large", x))
    assert (first.cache, again.cache) == ("miss", "memory")
    np.testing.assert_array_equal(first.outputs["logits"], again.outputs["logits"])
    as_float64 = await pipeline.infer(_req("digits-large", x.astype(np.int64)))
    assert as_float64.cache == "miss"  # int input is another key, even if cast to the same floats
    y = load_splits("digits").test_x[6:7]
    starved = await pipeline.infer(_req("digits-large", y, deadline_ms=0.001))
    assert starved.degraded and starved.reason and starved.served_by != "cpu:digits-large@1"
    fresh = await pipeline.infer(_req("digits-large", y))
    assert not fresh.degraded and fresh.served_by == "cpu:digits-large@1" and fresh.cache == "miss"


async def test_static_route_and_unknown_names(pipeline):
    x = load_splits("digits").test_x[:1]
    r = await pipeline.infer(_req("always-large", x))
    assert r.model == "digits-large" and r.route.decision == "expensive"
    from router.errors import InvalidRequest, ModelNotFound

    with pytest.raises(ModelNotFound):
        await pipeline.infer(_req("nope", x))
    with pytest.raises(InvalidRequest):
        await pipeline.infer(_req("digits", x[:, :10]))
