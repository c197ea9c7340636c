"""Threshold calibration for routes: pure functions over scores from a calibration split.

Every route strategy turns a request into one *score* in [0, 1] meaning "how likely the cheap
model is good enough" (cascade: the cheap model's confidence; predictive: the learned scorer's
estimate). One rule, everywhere: **escalate to the expensive model iff score < threshold**.

Calibration picks the threshold from the scores of a labelled calibration split:

- ``threshold_for_share(scores, target_share)``: the largest threshold that escalates at most
  ``target_share`` of the calibration requests (RouteLLM's "calibrate to a share of strong calls").
- ``threshold_for_accuracy(scores, cheap_correct, expensive_correct, target_accuracy,
  max_share=1.0)``: the smallest share of escalations whose routed accuracy reaches the target;
  when the target cannot be reached within ``max_share`` the best point within the cap is
  returned with ``met=False``.
- ``tradeoff_curve`` / ``apgr`` / ``share_to_reach`` describe the whole accuracy-vs-share curve
  (used by benchmarks and by the calibrate command's report).

Thresholds are placed half-way between consecutive distinct scores so that a score equal to a
calibration score does not sit on the boundary.

Example::

    >>> cal = threshold_for_share([0.2, 0.5, 0.9, 0.99], 0.5)
    >>> cal.threshold, cal.share
    (0.7, 0.5)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Calibration",
    "CurvePoint",
    "apgr",
    "escalation_mask",
    "gap_share_to_reach",
    "share_to_reach",
    "threshold_for_accuracy",
    "threshold_for_share",
    "tradeoff_curve",
]

ArrayLike = Sequence[float] | np.ndarray


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One operating point: escalate iff score < ``threshold``."""

    threshold: float
    share: float  # fraction of requests escalated
    accuracy: float | None  # routed accuracy (None when correctness was not given)


@dataclass(frozen=True, slots=True)
class Calibration:
    """A chosen threshold and what it gives on the calibration split."""

    threshold: float
    share: float
    accuracy: float | None
    met: bool  # False when the accuracy target could not be reached within the share cap
    n: int


def escalation_mask(scores: ArrayLike, threshold: float) -> np.ndarray:
    """The one decision rule: True where the request goes to the expensive model."""
    return np.asarray(scores, dtype=np.float64) < threshold


def _check(scores: ArrayLike) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if s.size == 0:
        raise ValueError("scores: need at least one calibration score")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores: contains NaN or infinite values")
    return s


def _candidates(s: np.ndarray) -> np.ndarray:
    """Thresholds giving every distinct share: below all, mid-points, above all."""
    u = np.unique(s)
    mids = (u[:-1] + u[1:]) / 2.0
    above = np.nextafter(u[-1], np.inf) if u[-1] >= 1.0 else min(1.0, u[-1] + 1e-6)
    return np.concatenate([[u[0]], mids, [above]])


def tradeoff_curve(
    scores: ArrayLike,
    cheap_correct: ArrayLike | None = None,
    expensive_correct: ArrayLike | None = None,
) -> tuple[CurvePoint, ...]:
    """All distinct operating points, share ascending (share 0 first, share 1 last)."""
    s = _check(scores)
    have_acc = cheap_correct is not None and expensive_correct is not None
    if have_acc:
        c = np.asarray(cheap_correct, dtype=bool).reshape(-1)
        e = np.asarray(expensive_correct, dtype=bool).reshape(-1)
        if c.shape != s.shape or e.shape != s.shape:
            raise ValueError(
                f"cheap_correct/expensive_correct: lengths {c.size}/{e.size} must equal "
                f"the number of scores {s.size}"
            )
    points = []
    for t in _candidates(s):
        esc = s < t
        acc = float(np.where(esc, e, c).mean()) if have_acc else None
        points.append(CurvePoint(float(t), float(esc.mean()), acc))
    return tuple(points)


def threshold_for_share(scores: ArrayLike, target_share: float) -> Calibration:
    """Largest threshold escalating at most ``target_share`` of the calibration requests."""
    if not 0.0 <= target_share <= 1.0:
        raise ValueError(f"target_share must be within [0, 1], got {target_share!r}")
    curve = tradeoff_curve(scores)
    best = max((p for p in curve if p.share <= target_share + 1e-12), key=lambda p: p.share)
    return Calibration(best.threshold, best.share, None, True, len(np.asarray(scores).reshape(-1)))


def threshold_for_accuracy(
    scores: ArrayLike,
    cheap_correct: ArrayLike,
    expensive_correct: ArrayLike,
    target_accuracy: float,
    *,
    max_share: float = 1.0,
) -> Calibration:
    """Smallest escalation share whose routed accuracy reaches ``target_accuracy``.

    Only points with share <= ``max_share`` are eligible; if none reaches the target, the most
    accurate eligible point (smallest share among ties) is returned with ``met=False``.
    """
    if not 0.0 <= target_accuracy <= 1.0:
        raise ValueError(f"target_accuracy must be within [0, 1], got {target_accuracy!r}")
    if not 0.0 <= max_share <= 1.0:
        raise ValueError(f"max_share must be within [0, 1], got {max_share!r}")
    curve = [p for p in tradeoff_curve(scores, cheap_correct, expensive_correct)
             if p.share <= max_share + 1e-12]
    n = len(np.asarray(scores).reshape(-1))
    for p in curve:  # share ascending
        if p.accuracy is not None and p.accuracy >= target_accuracy - 1e-12:
            return Calibration(p.threshold, p.share, p.accuracy, True, n)
    best = max(curve, key=lambda p: (p.accuracy, -p.share))
    return Calibration(best.threshold, best.share, best.accuracy, False, n)


def apgr(curve: Sequence[CurvePoint], cheap_accuracy: float, expensive_accuracy: float) -> float:
    """Average performance-gap recovered (RouteLLM's APGR): area under PGR(share), share 0..1.

    PGR = (routed accuracy - cheap accuracy) / (expensive accuracy - cheap accuracy). The curve
    is extended flat to share 1 so the area is over the whole [0, 1] range.
    """
    gap = expensive_accuracy - cheap_accuracy
    if gap <= 0:
        raise ValueError(
            f"expensive_accuracy ({expensive_accuracy}) must exceed cheap_accuracy "
            f"({cheap_accuracy}) for APGR to be defined"
        )
    xs = [p.share for p in curve]
    ys = [((p.accuracy or 0.0) - cheap_accuracy) / gap for p in curve]
    if xs[0] > 0:
        xs, ys = [0.0, *xs], [0.0, *ys]
    if xs[-1] < 1:
        xs, ys = [*xs, 1.0], [*ys, ys[-1]]
    area = sum((xs[i + 1] - xs[i]) * (ys[i] + ys[i + 1]) / 2 for i in range(len(xs) - 1))
    return float(area)


def share_to_reach(curve: Sequence[CurvePoint], accuracy: float) -> float | None:
    """Smallest escalation share whose routed accuracy is >= ``accuracy`` (None if never)."""
    for p in curve:
        if p.accuracy is not None and p.accuracy >= accuracy - 1e-12:
            return p.share
    return None


def gap_share_to_reach(
    curve: Sequence[CurvePoint], cheap_accuracy: float, expensive_accuracy: float, fraction: float
) -> float | None:
    """RouteLLM's CPT(x): share of expensive calls needed to recover ``fraction`` of the gap."""
    return share_to_reach(curve, cheap_accuracy + fraction * (expensive_accuracy - cheap_accuracy))
