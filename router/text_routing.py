"""Text routes: the outcome format, training and RouteLLM-style evaluation of a text router.

**Outcome format** (JSON lines, one query per line; shadow runs of a live route write it, users
may bring their own)::

    {"route": "support", "text": "How do I reset my password?",
     "cheap_ok": true, "expensive_ok": true,
     "inputs": {"ids": [[...]]}, "cheap_logits": [...]}     # inputs, cheap_logits optional

``cheap_ok`` / ``expensive_ok``: whether each model's answer was acceptable (graded against a
reference, a judge, or, without either, the expensive answer). ``read_text_outcomes`` rejects a
malformed line naming ``file:line`` and the field.

**The scorer** (``train_text_scorer``): L2-regularised logistic regression (``C`` = 1, classes
balanced, features standardised; numpy Newton, deterministic) predicting P(cheap answer is good
enough) from the request text's MiniLM embedding (384 dims, feature name ``text_embedding``),
optionally with tensor inputs (``use_inputs``) and the cheap model's confidence (``uses_cheap``:
max softmax, margin, entropy of ``cheap_logits``; the route then decides after the cheap model
ran, as a cascade). A row "needs the expensive model" when the cheap answer was not
ok and the expensive one was. Saved as safetensors + JSON metadata; never pickled.

**Evaluation** (``evaluate``): a seeded held-out split (``split_rows``: 30 % by default, seed 0)
that training never sees. On it, for the trained router and for a random router (uniform scores,
same seed): the full quality-vs-expensive-share curve, APGR, and CPT(50 %) / CPT(80 %), the
share of expensive calls needed to recover 50 % / 80 % of the quality gap (RouteLLM's metrics).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from policies.calibration import (
    Calibration,
    apgr,
    gap_share_to_reach,
    threshold_for_accuracy,
    threshold_for_share,
    tradeoff_curve,
)
from policies.routing import TEXT_FEATURE, LinearScorer
from router.route_training import fit_logistic

__all__ = [
    "TEXT_FEATURE",
    "RouterReport",
    "TextOutcomes",
    "calibrate_text_route",
    "evaluate",
    "features_of",
    "read_text_outcomes",
    "split_rows",
    "text_outcome_line",
    "text_scores",
    "train_text_scorer",
]

Embed = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True, slots=True)
class TextOutcomes:
    """One route's rows: texts, per-model correctness, optional tensor inputs (row-aligned)."""

    texts: tuple[str, ...]
    cheap_ok: np.ndarray
    expensive_ok: np.ndarray
    inputs: dict[str, np.ndarray]
    cheap_logits: np.ndarray | None = None  # only when every line carried them

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, idx: np.ndarray) -> TextOutcomes:
        return TextOutcomes(tuple(self.texts[i] for i in idx), self.cheap_ok[idx],
                            self.expensive_ok[idx], {k: v[idx] for k, v in self.inputs.items()},
                            None if self.cheap_logits is None else self.cheap_logits[idx])

    @property
    def cheap_suffices(self) -> np.ndarray:
        """The scorer's target: the cheap answer is ok, or the expensive one is no better."""
        return self.cheap_ok | ~self.expensive_ok


def text_outcome_line(route: str, text: str, cheap_ok: bool, expensive_ok: bool, *,
                      inputs: Mapping[str, Any] | None = None,
                      cheap_logits: Any | None = None) -> str:
    """One JSON line of the outcome format (no trailing newline)."""
    rec: dict[str, Any] = {"route": route, "text": text, "cheap_ok": bool(cheap_ok),
                           "expensive_ok": bool(expensive_ok)}
    if inputs:
        rec["inputs"] = {k: np.asarray(v).tolist() for k, v in inputs.items()}
    if cheap_logits is not None:
        rec["cheap_logits"] = np.asarray(cheap_logits, dtype=np.float64).reshape(-1).tolist()
    return json.dumps(rec, separators=(",", ":"))


def _record(path: Path | str, lineno: int, line: str) -> dict[str, Any]:
    where = f"{path}:{lineno}"
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(rec, dict):
        raise ValueError(f"{where}: expected an object, got {type(rec).__name__}")
    for field, kind in (("route", str), ("text", str), ("cheap_ok", bool),
                        ("expensive_ok", bool)):
        if not isinstance(rec.get(field), kind):
            raise ValueError(f"{where}: field {field!r} must be a {kind.__name__}, got "
                             f"{rec.get(field)!r}")
    if "inputs" in rec and not isinstance(rec["inputs"], dict):
        raise ValueError(f"{where}: field 'inputs' must be an object of arrays")
    return rec


def read_text_outcomes(path: Path | str, *, route: str, max_rows: int = 1_000_000
                       ) -> TextOutcomes:
    """The rows of ``route`` (other routes' lines are skipped, but still checked)."""
    texts: list[str] = []
    cheap: list[bool] = []
    exp: list[bool] = []
    inputs: dict[str, list[np.ndarray]] = {}
    logits: list[np.ndarray | None] = []
    seen_routes: set[str] = set()
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = _record(path, lineno, line)
            seen_routes.add(rec["route"])
            if rec["route"] != route:
                continue
            x = rec.get("inputs") or {}
            if texts and set(x) != set(inputs):
                raise ValueError(f"{path}:{lineno}: inputs {sorted(x)} differ from earlier "
                                 f"lines {sorted(inputs)}")
            try:
                for k, v in x.items():
                    inputs.setdefault(k, []).append(np.asarray(v, dtype=np.float64).reshape(-1))
                cl = rec.get("cheap_logits")
                logits.append(None if cl is None else np.asarray(cl, dtype=np.float64).reshape(-1))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: field 'inputs' or 'cheap_logits': {e}"
                                 ) from None
            texts.append(rec["text"])
            cheap.append(rec["cheap_ok"])
            exp.append(rec["expensive_ok"])
            if len(texts) >= max_rows:
                break
    if not texts:
        raise ValueError(f"{path}: no lines for route {route!r}; routes in the file: "
                         f"{sorted(seen_routes)}")
    have = [v for v in logits if v is not None]
    stacked = np.stack(have) if len(have) == len(logits) and len({v.size for v in have}) == 1 \
        else None
    out = TextOutcomes(tuple(texts), np.array(cheap), np.array(exp),
                       {k: np.stack(v) for k, v in inputs.items()}, stacked)
    y = out.cheap_suffices
    if y.all() or not y.any():
        which = "the cheap model suffices" if y.all() else "the expensive model is needed"
        raise ValueError(f"{path}: route {route!r} has one class only: on every line {which} "
                         "(a router needs lines of both kinds)")
    return out


def split_rows(n: int, *, held_out: float = 0.3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(train, held-out) row indices: a seeded permutation, so every run splits alike."""
    if not 0.0 < held_out < 1.0:
        raise ValueError(f"held_out must be in (0, 1), got {held_out!r}")
    perm = np.random.default_rng(seed).permutation(n)
    k = max(1, int(round(n * held_out)))
    return np.sort(perm[k:]), np.sort(perm[:k])


def features_of(data: TextOutcomes, embed: Embed, names: Sequence[str]
                ) -> dict[str, np.ndarray]:
    """The scorer inputs ``names`` of ``data``: tensor inputs and the texts' embeddings."""
    feats = {k: data.inputs[k] for k in names if k != TEXT_FEATURE}
    if TEXT_FEATURE in names:
        feats[TEXT_FEATURE] = np.asarray(embed(list(data.texts)), dtype=np.float64)
    return feats


def train_text_scorer(data: TextOutcomes, embed: Embed, *, use_inputs: bool = False,
                      uses_cheap: bool = False, c: float = 1.0) -> LinearScorer:
    """Fit the scorer on ``data`` (the training split)."""
    if c <= 0:
        raise ValueError(f"c must be > 0, got {c!r}")
    if uses_cheap and data.cheap_logits is None:
        raise ValueError("uses_cheap needs 'cheap_logits' (same length) on every line")
    if use_inputs and not data.inputs:
        raise ValueError("use_inputs: the lines carry no 'inputs'")
    names = (TEXT_FEATURE, *(sorted(data.inputs) if use_inputs else ()))
    probe = LinearScorer(np.zeros(1), 0.0, np.zeros(1), np.ones(1), names, uses_cheap)
    x = probe.features(features_of(data, embed, names),
                       data.cheap_logits if uses_cheap else None)
    y = data.cheap_suffices.astype(np.float64)
    mean, scale = x.mean(0), x.std(0) + 1e-6
    weight, bias = fit_logistic((x - mean) / scale, y, c)
    return LinearScorer(weight, bias, mean, scale, names, uses_cheap)


def text_scores(scorer: LinearScorer, data: TextOutcomes, embed: Embed) -> np.ndarray:
    """The scorer's P(cheap suffices) for every row of ``data``."""
    if scorer.uses_cheap and data.cheap_logits is None:
        raise ValueError("this scorer uses the cheap model's confidence: the lines need "
                         "'cheap_logits'")
    return scorer.score(features_of(data, embed, scorer.input_names),
                        data.cheap_logits if scorer.uses_cheap else None)


@dataclass(frozen=True, slots=True)
class RouterReport:
    """RouteLLM's metrics of one router on the held-out rows."""

    apgr: float
    cpt50: float | None
    cpt80: float | None
    curve: tuple[tuple[float, float], ...]  # (expensive share, quality), share ascending

    def as_dict(self) -> dict[str, Any]:
        return {"apgr": self.apgr, "cpt50": self.cpt50, "cpt80": self.cpt80,
                "curve": [{"expensive_share": s, "quality": q} for s, q in self.curve]}


def _report(scores: np.ndarray, data: TextOutcomes, cheap_q: float, exp_q: float
            ) -> RouterReport:
    curve = tradeoff_curve(scores, data.cheap_ok, data.expensive_ok)
    return RouterReport(
        apgr(curve, cheap_q, exp_q),
        gap_share_to_reach(curve, cheap_q, exp_q, 0.5),
        gap_share_to_reach(curve, cheap_q, exp_q, 0.8),
        tuple((p.share, float(p.accuracy or 0.0)) for p in curve))


def evaluate(scorer: LinearScorer, held_out: TextOutcomes, embed: Embed, *, seed: int = 0
             ) -> dict[str, Any]:
    """Metrics of the trained and of a random router on ``held_out`` (see module doc)."""
    cheap_q = float(held_out.cheap_ok.mean())
    exp_q = float(held_out.expensive_ok.mean())
    if exp_q <= cheap_q:
        raise ValueError(f"held-out quality: expensive {exp_q:.3f} <= cheap {cheap_q:.3f}; "
                         "nothing to route for")
    scores = text_scores(scorer, held_out, embed)
    rand = np.random.default_rng(seed).random(len(held_out))
    return {"rows": len(held_out), "cheap_quality": cheap_q, "expensive_quality": exp_q,
            "trained": _report(scores, held_out, cheap_q, exp_q).as_dict(),
            "random": _report(rand, held_out, cheap_q, exp_q).as_dict()}


def calibrate_text_route(scores: np.ndarray, data: TextOutcomes, *,
                         target_share: float | None = None,
                         target_quality_fraction: float | None = None) -> Calibration:
    """Threshold for a target expensive share, or for a fraction of the expensive model's
    quality (routed quality >= fraction x expensive quality, cheapest share reaching it)."""
    if (target_share is None) == (target_quality_fraction is None):
        raise ValueError("give exactly one of target_share, target_quality_fraction")
    if target_share is not None:
        return threshold_for_share(scores, target_share)
    assert target_quality_fraction is not None
    if not 0.0 < target_quality_fraction <= 1.0:
        raise ValueError(f"target_quality_fraction must be in (0, 1], got "
                         f"{target_quality_fraction!r}")
    goal = target_quality_fraction * float(data.expensive_ok.mean())
    return threshold_for_accuracy(scores, data.cheap_ok, data.expensive_ok, goal)
