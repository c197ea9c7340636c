"""The bundled labelled near-miss set of the semantic tier (``data/near_misses.jsonl``).

Written by hand for this project: 174 pairs ``{"kind", "same", "stored", "asked"}``. ``same`` is
true for paraphrases (a cached answer to ``stored`` is right for ``asked``); the other pairs are
near-misses of one kind each: ``numbers``, ``comparators``, ``time``, ``negation``,
``direction`` (from/to, buy/sell and other opposites) and ``entities`` (swapped or substituted).
Tests assert the tier never serves a near-miss at its default settings; ``benchmarks.cache``
reports precision and recall on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from pool.config import CacheConfig
from router.cache.types import CachedAnswer
from router.schemas import CacheControl

__all__ = ["KINDS", "NearMissPair", "NearMissScore", "load_near_misses", "score_near_misses"]

KINDS = ("paraphrase", "numbers", "comparators", "time", "negation", "direction", "entities")


@dataclass(frozen=True, slots=True)
class NearMissPair:
    """One labelled pair: is ``stored``'s answer right for ``asked``?"""

    kind: str
    same: bool
    stored: str
    asked: str


def load_near_misses() -> list[NearMissPair]:
    """Every pair of the bundled set, in file order."""
    text = resources.files("router.cache").joinpath("data/near_misses.jsonl").read_text()
    pairs = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec["kind"] not in KINDS or rec["same"] != (rec["kind"] == "paraphrase"):
            raise ValueError(f"near_misses.jsonl:{lineno}: bad kind/same {rec!r}")
        pairs.append(NearMissPair(rec["kind"], bool(rec["same"]), rec["stored"], rec["asked"]))
    return pairs


@dataclass(frozen=True, slots=True)
class NearMissScore:
    """How a cache did on the set: wrong hits (kind, stored, asked, similarity) and recall."""

    wrong: tuple[tuple[str, str, str, float], ...]
    paraphrase_hits: int
    paraphrases: int
    guard_rejections: int

    @property
    def recall(self) -> float:
        return self.paraphrase_hits / self.paraphrases if self.paraphrases else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"pairs_wrong_hits": len(self.wrong), "wrong": [list(w) for w in self.wrong],
                "paraphrase_hits": self.paraphrase_hits, "paraphrases": self.paraphrases,
                "recall": round(self.recall, 4), "guard_rejections": self.guard_rejections}


async def score_near_misses(cache: Any, pairs: list[NearMissPair] | None = None, *,
                            model: str = "near-miss") -> NearMissScore:
    """Store every ``stored`` text of ``pairs`` in ``cache`` (a ``ResultCache`` with a semantic
    tier), then ask every ``asked`` text. A hit is right only when the entry it came from is the
    same text or labelled its paraphrase. ``model`` must be a store of its own."""


    pairs = load_near_misses() if pairs is None else pairs
    policy = CacheConfig(mode="semantic", ttl_s=600)  # the default threshold applies
    stored = list(dict.fromkeys(p.stored for p in pairs))
    same = {(p.stored, p.asked) for p in pairs if p.same}

    async def ask(text: str, ident: int, value: int, fill: bool) -> Any:
        async def compute() -> tuple[CachedAnswer, bool]:
            return CachedAnswer(outputs={"y": np.array([value])}, served_by=model), True

        return await cache.get_or_compute(  # distinct ids per text: only the semantic tier hits
            model=model, version="1", inputs={"ids": np.array([ident])}, text=text,
            policy=policy, control=CacheControl(skip_read=fill), compute=compute)

    for i, text in enumerate(stored):
        await ask(text, i, i, True)
    await cache.drain()
    before = cache.counters().get("semantic.guard_rejected", 0)
    wrong, right = [], 0
    for j, p in enumerate(pairs):
        answer, outcome = await ask(p.asked, 10_000_000 + j, -1, False)
        cache.clear_memory()
        if outcome.tier != "semantic":
            continue
        source = stored[int(answer.outputs["y"][0])]
        if source == p.asked or (source, p.asked) in same:
            right += p.same
        else:
            wrong.append((p.kind, source, p.asked, round(float(outcome.similarity or 0), 3)))
    rejected = cache.counters().get("semantic.guard_rejected", 0) - before
    return NearMissScore(tuple(wrong), right, len(same), rejected)
