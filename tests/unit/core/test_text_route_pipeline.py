"""A text route in the in-process pipeline: the router scores the request text's MiniLM
embedding, and the semantic cache of the model it picks reuses that embedding (one per request,
counted by the shared embedder)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from deploy.demo_data import load_splits
from policies.routing import TEXT_FEATURE, LinearScorer, make_strategy
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository
from router.cache import CacheSettings, ResultCache, SharedEmbedder
from router.catalog import ModelCatalog
from router.errors import InvalidRequest
from router.pipeline import Pipeline, PipelineConfig
from router.pool_client import LocalPoolClient
from router.routes import load_routes
from router.schemas import InferenceRequest

ROUTES = load_routes([{"name": "ask", "strategy": "predictive", "cheap": "digits-small",
                       "expensive": "digits-large", "predictive_model": "unused.safetensors"}])


def _semantic(repo, model):
    path = repo / model / "config.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["cache"] = {"mode": "semantic", "ttl_s": 300}
    path.write_text(yaml.safe_dump(cfg))


async def _build(demo_repo, minilm, tmp_path, *, shadow_log=None):
    for m in ("digits-small", "digits-large"):
        _semantic(demo_repo, m)
    host = ModelHost(ModelRepository(demo_repo, settle_s=0),
                     DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=64 << 20)))
    await host.sync()

    async def fetch():
        return host.index()

    shared = SharedEmbedder(minilm)
    # A scorer on the text alone: "cheap suffices" along one direction of the embedding.
    direction = minilm.embed(["account password email"])[0].astype(np.float64)
    scorer = LinearScorer(direction * 20, -5.0, np.zeros(384), np.ones(384), (TEXT_FEATURE,))
    rate = 0.0 if shadow_log is None else 1.0
    strategy = make_strategy("predictive", cheap="digits-small", expensive="digits-large",
                             scorer=scorer, threshold=0.5, shadow_rate=rate)
    routes = load_routes([{**ROUTES["ask"].model_dump(), "shadow_rate": rate,
                           "outcome_log": shadow_log}])
    cache = ResultCache(CacheSettings(semantic_dir=str(tmp_path / "sem")), embedder=shared)
    p = Pipeline(ModelCatalog(fetch), {"cpu": LocalPoolClient(host)},
                 config=PipelineConfig(default_deadline_ms=5000), routes=routes,
                 strategies={"ask": strategy}, cache=cache, text_embedder=shared)
    return p, cache, shared, host


@pytest.fixture
async def setup(demo_repo, minilm, tmp_path):
    p, cache, shared, host = await _build(demo_repo, minilm, tmp_path)
    yield p, cache, shared
    await p.close()
    await cache.close()
    await host.worker.close()


async def test_one_embedding_per_request_shared_by_router_and_semantic_cache(setup):
    pipeline, cache, shared = setup
    x = load_splits("digits").test_x
    texts = ["How do I reset my account password?", "Prove that there are infinitely many primes"]
    decisions = []
    for i, text in enumerate(texts):
        r = await pipeline.infer(InferenceRequest(model="ask", inputs={"pixels": x[i:i + 1]},
                                                  text=text))
        await cache.drain()
        decisions.append(r.route.decision)
        assert shared.computed == i + 1  # the router's embedding, reused by the cache lookup
    counters = cache.counters()
    assert counters["semantic.miss"] == 2 and counters["semantic.write"] == 2
    assert decisions == ["cheap", "expensive"]  # the text, not the pixels, decided
    again = await pipeline.infer(InferenceRequest(
        model="ask", inputs={"pixels": x[7:8]}, text="How do I reset my account password?"))
    assert again.cache == "semantic" and shared.computed == 2  # nothing embedded twice


async def test_a_text_route_without_text_is_a_400_naming_the_field(setup):
    pipeline, _, _ = setup
    x = load_splits("digits").test_x[:1]
    with pytest.raises(InvalidRequest) as e:
        await pipeline.infer(InferenceRequest(model="ask", inputs={"pixels": x}))
    assert e.value.field == "text" and e.value.status_code == 400


def test_a_text_route_without_an_embedder_fails_at_load():
    scorer = LinearScorer(np.zeros(384), 0.0, np.zeros(384), np.ones(384), (TEXT_FEATURE,))
    strategy = make_strategy("predictive", cheap="a", expensive="b", scorer=scorer)

    async def fetch():
        return {}

    with pytest.raises(ValueError, match=r"routes \['ask'\] score the request text"):
        Pipeline(ModelCatalog(fetch), {}, routes=ROUTES, strategies={"ask": strategy})


async def test_shadow_runs_of_a_text_route_write_the_text_outcome_format(demo_repo, minilm,
                                                                        tmp_path):
    import asyncio
    import json

    log = tmp_path / "outcomes.jsonl"
    p, cache, shared, host = await _build(demo_repo, minilm, tmp_path, shadow_log=str(log))
    try:
        x = load_splits("digits").test_x
        texts = ["How do I reset my account password?", "Prove there are infinitely many primes"]
        for i, text in enumerate(texts):
            await p.infer(InferenceRequest(model="ask", inputs={"pixels": x[i:i + 1]}, text=text))
        for _ in range(200):  # the other model runs in the background
            if not p.route_runner._background:
                break
            await asyncio.sleep(0.02)
        await cache.drain()
    finally:
        await p.close()
        await cache.close()
        await host.worker.close()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(rec["text"] for rec in lines) == sorted(texts)
    for rec in lines:
        assert rec["route"] == "ask" and rec["expensive_ok"] is True
        assert isinstance(rec["cheap_ok"], bool) and "pixels" in rec["inputs"]
    assert shared.computed == 2  # the shadow runs reused the request's embedding
