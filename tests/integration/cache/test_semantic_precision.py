"""Precision of the semantic tier at its default threshold, with the real MiniLM embedder.

All first texts of the labelled pairs go into one store (as in production, where a store holds
many entries); then every second text is looked up. A hit is right only when the stored text it
came from is labelled a paraphrase of the question (any pair of the set, or the same text);
anything else is a wrong answer served. Recall is reported and must stay above a floor, so the
tier cannot be "precise" by never hitting.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.schemas import CacheControl

from .paraphrase_pairs import PAIRS

SEMANTIC = CacheConfig(mode="semantic", ttl_s=600)  # default threshold (no per-model override)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    # On a small, busy CI box torch's spinning intra-op threads make each embedding ~10x slower;
    # one thread is plenty for one sentence. Process-wide, so restored afterwards.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_set_is_big_and_balanced_enough():
    positives = sum(1 for *_, same in PAIRS if same)
    assert len(PAIRS) >= 30 and positives >= 15 and len(PAIRS) - positives >= 15


async def _ask(cache: ResultCache, text: str, ident: int, value: int, *, fill=False):
    async def compute():
        return CachedAnswer(outputs={"y": np.array([value])}, served_by="m"), True

    return await cache.get_or_compute(
        model="paraphrase",
        version="1",
        inputs={"ids": np.array([ident])},  # distinct per text: only the semantic tier can hit
        text=text,
        policy=SEMANTIC,
        control=CacheControl(skip_read=fill),  # fill: write without looking
        compute=compute,
    )


async def test_no_wrong_semantic_hits_at_default_threshold(tmp_path, minilm, record_property):
    stored = list(dict.fromkeys(a for a, _, _ in PAIRS))
    same = {(a, b) for a, b, s in PAIRS if s}
    cache = ResultCache(CacheSettings(semantic_dir=str(tmp_path)), embedder=minilm)
    wrong, right, missed = [], [], []
    try:
        for i, text in enumerate(stored):
            _, outcome = await _ask(cache, text, i, i, fill=True)
            assert outcome.tier == "off"
        await cache.drain()
        for j, (_, asked, is_same) in enumerate(PAIRS):
            answer, outcome = await _ask(cache, asked, 10_000 + j, -1)
            if outcome.tier == "semantic":
                source = stored[int(answer.outputs["y"][0])]
                assert outcome.similarity is not None
                assert outcome.similarity >= CacheSettings().semantic_threshold
                ok = source == asked or (source, asked) in same
                (right if ok else wrong).append((source, asked, round(outcome.similarity, 3)))
            elif is_same:
                missed.append(asked)
            cache.clear_memory()
    finally:
        await cache.close()
    positives = len(same)
    recall = len(right) / positives
    record_property("semantic_recall", recall)
    print(
        f"\nsemantic tier at default threshold: {len(right) + len(wrong)} hits, "
        f"{len(wrong)} wrong; recall {len(right)}/{positives} = {recall:.2f}"
    )
    assert wrong == [], f"wrong semantic hits: {wrong}"
    assert recall >= 0.3, f"recall {recall:.2f} too low; missed: {missed}"
