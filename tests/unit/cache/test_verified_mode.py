"""Verified mode through the real facade and semantic store (sqlite + faiss), on a labelled
stream: paraphrases (filler words added) share an answer; traps swap one plain content word
(no number, time, comparator or negation, so the lexical guard lets them through) and do not.
The realised error rate counts every served hit against the labels."""

from __future__ import annotations

import random

import numpy as np
import pytest

from alerting.telemetry import Telemetry
from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.cache._private.metrics import register_error_rate_metric
from router.schemas import CacheControl
from tests.support.cache import BagOfWordsEmbedder

SEM = CacheConfig(mode="semantic", ttl_s=600)
FRUITS = ["apple", "orange", "mango", "lemon"]
DRINKS = ["juice", "smoothie"]
FILLER = ["", "please", "thanks"]


def _stream(n: int, seed: int):
    rng = random.Random(seed)
    for _ in range(n):
        fruit, drink = rng.choice(FRUITS), rng.choice(DRINKS)
        text = f"price of fresh {fruit} {drink} in the shop {rng.choice(FILLER)}".strip()
        yield text, FRUITS.index(fruit) * 10 + DRINKS.index(drink)


async def _run(cache: ResultCache, n: int):
    served = wrong = 0
    for i, (text, truth) in enumerate(_stream(n, 3)):
        async def compute(truth=truth):
            return CachedAnswer(outputs={"y": np.array([truth])}, served_by="m"), True

        answer, outcome = await cache.get_or_compute(
            model="m", version="1", inputs={"ids": np.array([i])}, text=text, policy=SEM,
            control=CacheControl(), compute=compute)
        await cache.drain()
        if outcome.tier == "semantic":
            served += 1
            wrong += int(answer.outputs["y"][0]) != truth
        cache.clear_memory()
    return served, wrong


@pytest.mark.parametrize("delta", [0.05])
async def test_observed_and_realised_error_rates_stay_within_max_error_rate(tmp_path, delta):
    settings = CacheSettings(semantic_dir=str(tmp_path), verify_max_error_rate=delta,
                             verify_sample_rate=0.2, verify_min_similarity=0.5)
    cache = ResultCache(settings, embedder=BagOfWordsEmbedder(), rng=random.Random(1).random)
    telemetry = Telemetry.in_memory()
    register_error_rate_metric(telemetry.meter_provider, cache.verification)
    try:
        served, wrong = await _run(cache, 400)
        st = cache.verification()
    finally:
        await cache.close()
    assert st is not None
    print(f"\nverified mode: served {served}, realised wrong {wrong}, status {st.as_dict()}")
    assert served >= 80  # it learned to serve the paraphrases
    assert wrong / served <= delta
    assert st.verified_hits > 0 and st.explored > 0
    assert st.observed_error_rate is not None and st.observed_error_rate <= delta
    gauges = {m.name: m.data.data_points[0].value
              for rm in telemetry.metric_reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics}
    assert gauges["timeshare.cache.semantic.error_rate"] == st.observed_error_rate


async def test_the_stream_is_a_trap_for_a_plain_threshold(tmp_path):
    """Same stream, plain mode at a threshold that serves a similar number of hits: wrong
    answers well above the budget (so the verified test above is not passing trivially)."""
    cache = ResultCache(CacheSettings(semantic_dir=str(tmp_path), semantic_threshold=0.75),
                        embedder=BagOfWordsEmbedder())
    try:
        served, wrong = await _run(cache, 150)
    finally:
        await cache.close()
    assert served >= 50 and wrong / served > 0.1
