"""Training and calibrating routes from data: the outcome log, the predictive scorer, CLIs.

**Outcome log** (JSON lines; one line per request where both models ran, e.g. a shadow sample)::

    {"route": "digits", "inputs": {"pixels": [[...64 floats...]]},
     "cheap_logits": [[...10...]], "expensive_logits": [[...10...]], "labels": [3] | null,
     "ts": 1712345678.9}

``outcome_line(...)`` writes one; ``read_outcomes(path)`` reads them back (bounded by
``max_rows``). ``labels`` are optional: without ground truth the expensive model's answer is the
reference.

**Scorer training** (``train_scorer``): logistic regression (numpy Newton, L2) predicting
P(cheap answer suffices) from the request inputs (and, with ``uses_cheap``, the cheap model's
confidence features). A row "needs the expensive model" when the cheap answer is wrong against
the reference and the expensive one is right. Saved as safetensors + JSON metadata
(``save_scorer`` / ``load_scorer``); nothing is pickled.

The ``timeshare routes retrain|calibrate`` commands over these live in ``deploy.routes_cli``
(so this module never imports ``router.routes``, which imports it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from policies.calibration import (
    Calibration,
    threshold_for_accuracy,
    threshold_for_share,
    tradeoff_curve,
)
from policies.routing import LinearScorer, RouteStrategy

__all__ = [
    "Outcomes",
    "calibrate_route",
    "fit_logistic",
    "load_scorer",
    "needs_expensive",
    "outcome_line",
    "read_outcomes",
    "route_scores",
    "save_scorer",
    "train_scorer",
]

SCORER_FORMAT = "timeshare-linear-router/1"
MAX_ROWS = 1_000_000  # read_outcomes bound: a log larger than this is truncated (oldest kept)


@dataclass(frozen=True, slots=True)
class Outcomes:
    """Rows where both models ran. ``labels`` is None unless every record carried labels."""

    inputs: dict[str, np.ndarray]
    cheap_logits: np.ndarray
    expensive_logits: np.ndarray
    labels: np.ndarray | None

    def __len__(self) -> int:
        return int(self.cheap_logits.shape[0])


def outcome_line(route: str, inputs: Mapping[str, Any], cheap_logits: Any, expensive_logits: Any,
                 *, labels: Sequence[int] | None = None, ts: float | None = None) -> str:
    """One JSON line for the outcome log (no trailing newline)."""
    rec = {
        "route": route,
        "inputs": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in inputs.items()},
        "cheap_logits": np.asarray(cheap_logits, dtype=np.float64).tolist(),
        "expensive_logits": np.asarray(expensive_logits, dtype=np.float64).tolist(),
        "labels": None if labels is None else [int(v) for v in labels],
        "ts": time.time() if ts is None else ts,
    }
    return json.dumps(rec, separators=(",", ":"))


def _rows(a: Any) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    return arr[None, :] if arr.ndim == 1 else arr


def read_outcomes(path: Path | str, *, route: str | None = None,
                  max_rows: int = MAX_ROWS) -> Outcomes:
    """Read an outcome log; ``route`` filters. Raises ``ValueError`` naming line and field."""
    ins: dict[str, list[np.ndarray]] = {}
    cl: list[np.ndarray] = []
    el: list[np.ndarray] = []
    labels: list[int] = []
    all_labelled = True
    n = 0
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if route is not None and rec.get("route") != route:
                    continue
                c, e = _rows(rec["cheap_logits"]), _rows(rec["expensive_logits"])
                x = {k: _rows(v) for k, v in rec["inputs"].items()}
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{path}:{lineno}: bad outcome record ({err!r})") from None
            if c.shape[0] != e.shape[0] or any(v.shape[0] != c.shape[0] for v in x.values()):
                raise ValueError(f"{path}:{lineno}: inputs/cheap_logits/expensive_logits "
                                 "have different row counts")
            if ins and set(x) != set(ins):
                raise ValueError(f"{path}:{lineno}: inputs {sorted(x)} differ from earlier "
                                 f"records {sorted(ins)}")
            for k, v in x.items():
                ins.setdefault(k, []).append(v)
            cl.append(c)
            el.append(e)
            if rec.get("labels") is None:
                all_labelled = False
            else:
                labels.extend(int(v) for v in rec["labels"])
            n += c.shape[0]
            if n >= max_rows:
                break
    if not cl:
        raise ValueError(f"{path}: no outcome records" + (f" for route {route!r}" if route else ""))
    return Outcomes(
        {k: np.concatenate(v) for k, v in ins.items()}, np.concatenate(cl), np.concatenate(el),
        np.asarray(labels, dtype=np.int64) if all_labelled else None,
    )


def needs_expensive(cheap_logits: np.ndarray, expensive_logits: np.ndarray,
                    labels: np.ndarray | None = None) -> np.ndarray:
    """Per row: the cheap answer is wrong and the expensive one right (reference = labels, or
    the expensive answer when there are none)."""
    c = np.asarray(cheap_logits).argmax(1)
    e = np.asarray(expensive_logits).argmax(1)
    if labels is None:
        return c != e
    return (c != labels) & (e == labels)


def fit_logistic(x: np.ndarray, y: np.ndarray, c: float, *,
                  iters: int = 50) -> tuple[np.ndarray, float]:
    """L2 logistic regression by Newton's method, classes balanced (sklearn's objective:
    ``c * weighted log-loss + ||w||^2 / 2``, intercept unpenalised). ``iters`` bounds the loop."""
    n, d = x.shape
    pos = y.mean()
    sw = np.where(y == 1, 0.5 / pos, 0.5 / (1 - pos))  # balanced class weights
    a = np.concatenate([x, np.ones((n, 1))], axis=1)
    beta = np.zeros(d + 1)
    reg = np.full(d + 1, 1.0 / c)
    reg[-1] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ beta, -60, 60)))
        grad = a.T @ (sw * (p - y)) + reg * beta
        hess = (a * (sw * p * (1 - p))[:, None]).T @ a + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta[:-1], float(beta[-1])


def train_scorer(outcomes: Outcomes, *, input_names: Sequence[str] | None = None,
                 uses_cheap: bool = False, c: float = 1.0) -> LinearScorer:
    """Fit the logistic-regression scorer (``c`` = inverse L2 strength). Classes are balanced
    so the rare "needs expensive" rows are not ignored."""
    if c <= 0:
        raise ValueError(f"c must be > 0, got {c!r}")
    names = tuple(input_names or sorted(outcomes.inputs))
    probe = LinearScorer(np.zeros(1), 0.0, np.zeros(1), np.ones(1), names, uses_cheap)
    x = probe.features(outcomes.inputs, outcomes.cheap_logits if uses_cheap else None)
    y = (~needs_expensive(outcomes.cheap_logits, outcomes.expensive_logits, outcomes.labels))
    mean, scale = x.mean(0), x.std(0) + 1e-6
    if y.all() or not y.any():  # one class only: a constant scorer
        p = 0.999 if y.all() else 0.001
        return LinearScorer(np.zeros(x.shape[1]), float(np.log(p / (1 - p))), mean, scale,
                            names, uses_cheap)
    weight, bias = fit_logistic((x - mean) / scale, y.astype(np.float64), c)
    return LinearScorer(weight, bias, mean, scale, names, uses_cheap)


def save_scorer(scorer: LinearScorer, path: Path | str) -> None:
    """Write the scorer as safetensors (tensors) + metadata (bias, features, format)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"format": SCORER_FORMAT, "bias": repr(scorer.bias),
            "input_names": json.dumps(list(scorer.input_names)),
            "uses_cheap": json.dumps(scorer.uses_cheap)}
    save_file({"weight": scorer.weight, "mean": scorer.mean, "scale": scorer.scale},
              str(path), metadata=meta)


def load_scorer(path: Path | str) -> LinearScorer:
    """Read a scorer written by ``save_scorer``; ``ValueError`` naming the file otherwise."""
    try:
        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
            t = {k: f.get_tensor(k) for k in ("weight", "mean", "scale")}
    except FileNotFoundError:
        raise ValueError(f"predictive_model {path}: file not found (train one with "
                         "`timeshare routes retrain`)") from None
    except (SafetensorError, OSError, KeyError) as e:
        raise ValueError(f"predictive_model {path}: not a scorer file ({e})") from None
    if meta.get("format") != SCORER_FORMAT:
        raise ValueError(f"predictive_model {path}: format {meta.get('format')!r}, expected "
                         f"{SCORER_FORMAT!r}")
    return LinearScorer(t["weight"].astype(np.float64), float(meta["bias"]),
                        t["mean"].astype(np.float64), t["scale"].astype(np.float64),
                        tuple(json.loads(meta["input_names"])), json.loads(meta["uses_cheap"]))


def route_scores(strategy: RouteStrategy, inputs: Mapping[str, np.ndarray],
                 cheap_logits: np.ndarray) -> np.ndarray:
    """Per-row scores the strategy's threshold applies to (cascade: cheap confidence;
    predictive: scorer output), for calibration and benchmarks."""
    scorer = getattr(strategy, "scorer", None)
    if isinstance(scorer, LinearScorer):
        return scorer.score(inputs, cheap_logits if scorer.uses_cheap else None)
    return strategy.cheap_scores(inputs, cheap_logits)


def calibrate_route(scores: np.ndarray, *, cheap_correct: np.ndarray | None = None,
                    expensive_correct: np.ndarray | None = None,
                    target_share: float | None = None,
                    target_accuracy: float | None = None) -> Calibration:
    """Pick the threshold: by share, by accuracy, or the cheapest share reaching the accuracy
    within a share cap (both given)."""
    if target_accuracy is not None:
        if cheap_correct is None or expensive_correct is None:
            raise ValueError("target_accuracy needs labelled calibration data")
        return threshold_for_accuracy(scores, cheap_correct, expensive_correct, target_accuracy,
                                      max_share=1.0 if target_share is None else target_share)
    if target_share is None:
        raise ValueError("give target_share and/or target_accuracy")
    cal = threshold_for_share(scores, target_share)
    if cheap_correct is not None and expensive_correct is not None:
        acc = next(p.accuracy for p in tradeoff_curve(scores, cheap_correct, expensive_correct)
                   if p.threshold == cal.threshold)
        cal = Calibration(cal.threshold, cal.share, acc, True, cal.n)
    return cal
