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

__all__ = ["KINDS", "NearMissPair", "load_near_misses"]

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
