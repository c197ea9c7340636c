"""Semantic tier mechanics with a deterministic fake embedder (the real one: integration)."""

import numpy as np
import pytest

from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.schemas import CacheControl
from tests.support.cache import BagOfWordsEmbedder

SEM = CacheConfig(mode="semantic", ttl_s=60, similarity_threshold=0.8)


@pytest.fixture
async def cache(tmp_path, clock):
    c = ResultCache(
        CacheSettings(semantic_dir=str(tmp_path / "sem")),
        embedder=BagOfWordsEmbedder(),
        clock=clock,
    )
    yield c
    await c.close()
    assert c.idle  # nothing leaked: no flights, no pending writes


async def ask(cache, text, *, value, version="1", policy=SEM, inputs_seed=None):
    calls = []

    async def compute():
        calls.append(text)
        return CachedAnswer(outputs={"y": np.array([value])}, served_by="cpu:m@1"), True

    # Different token ids per text, as a tokenizer would produce: exact tiers cannot match.
    seed = inputs_seed if inputs_seed is not None else abs(hash(text)) % 10_000
    answer, outcome = await cache.get_or_compute(
        model="m",
        version=version,
        inputs={"ids": np.array([seed])},
        text=text,
        policy=policy,
        control=CacheControl(),
        compute=compute,
    )
    await cache.drain()
    return answer, outcome, len(calls)


async def test_similar_text_hits_with_similarity_label(cache):
    await ask(cache, "please reset my account password now", value=1.0)
    answer, outcome, calls = await ask(cache, "please reset my account password", value=2.0)
    assert outcome.tier == "semantic" and calls == 0
    assert outcome.similarity is not None and 0.8 <= outcome.similarity <= 1.0
    assert float(answer.outputs["y"][0]) == 1.0 and answer.served_by == "cpu:m@1"


async def test_below_threshold_misses(cache):
    await ask(cache, "please reset my account password now", value=1.0)
    _, outcome, calls = await ask(cache, "what is the weather in paris", value=2.0)
    assert outcome.tier == "miss" and calls == 1


async def test_numbers_guard_rejects_close_texts(cache):
    await ask(cache, "transfer 100 dollars to my savings account", value=1.0)
    _, outcome, calls = await ask(cache, "transfer 500 dollars to my savings account", value=2.0)
    assert outcome.tier == "miss" and calls == 1
    assert cache.counters()["semantic.guard_rejected"] >= 1


async def test_versions_have_separate_indexes(cache):
    await ask(cache, "please reset my account password now", value=1.0, version="1")
    _, outcome, calls = await ask(
        cache, "please reset my account password now", value=2.0, version="2", inputs_seed=1
    )
    assert outcome.tier == "miss" and calls == 1


async def test_semantic_ttl(cache, clock):
    await ask(cache, "please reset my account password now", value=1.0)
    clock.advance(61)
    _, outcome, _ = await ask(cache, "please reset my account password", value=2.0)
    assert outcome.tier == "miss"


async def test_exact_mode_models_never_use_the_semantic_tier(cache):
    exact = CacheConfig(mode="exact")
    await ask(cache, "please reset my account password now", value=1.0, policy=exact)
    _, outcome, calls = await ask(
        cache, "please reset my account password", value=2.0, policy=exact
    )
    assert outcome.tier == "miss" and calls == 1


async def test_store_survives_reopen(tmp_path, clock):
    settings = CacheSettings(semantic_dir=str(tmp_path / "sem"))
    first = ResultCache(settings, embedder=BagOfWordsEmbedder(), clock=clock)
    await ask(first, "please reset my account password now", value=3.0)
    await first.close()
    second = ResultCache(settings, embedder=BagOfWordsEmbedder(), clock=clock)
    try:
        answer, outcome, _ = await ask(second, "please reset my account password", value=9.0)
        assert outcome.tier == "semantic" and float(answer.outputs["y"][0]) == 3.0
    finally:
        await second.close()
