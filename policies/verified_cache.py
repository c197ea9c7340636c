"""Verified semantic caching (after vCache, 2025): serve a semantic hit only where the verified
error rate stays within a user-set ``max_error_rate``. Pure decisions; the cache facade does the
I/O (looks up the candidate, computes fresh answers, compares, feeds the outcomes back).

Evidence comes from *verifications*: a fresh answer compared with the cached one.

- A sampled fraction (``sample_rate``) of served hits is verified in the background.
- A candidate that is *not* served (its similarity is below the threshold that applies) is
  computed anyway; comparing that fresh answer with the candidate's cached one is free evidence
  below the threshold, which is what lets the threshold come down.

Two thresholds apply to a candidate of similarity ``s``; it is served iff ``s`` reaches both:

- **global** (``global_threshold``): the lowest similarity ``t`` at which the one-sided Wilson
  upper bound (``z``) of the error rate among verified outcomes with similarity >= ``t`` is
  <= ``max_error_rate``. Until the evidence certifies a ``t`` nothing is served: every
  candidate is computed and compared (vCache's exploration), so the guarantee holds from the
  first request, at the price of a cold start (~``z^2 / max_error_rate`` clean outcomes).
- **per entry** (``EntryEvidence.threshold``): just above the highest similarity at which this
  entry's answer was verified wrong; an entry proven wrong for some paraphrase is not served to
  a less similar one.

Example::

    >>> cfg = VerifyConfig(max_error_rate=0.05)
    >>> global_threshold((), cfg)                 # no evidence: serve nothing yet
    inf
    >>> t = global_threshold([(0.9 + i / 2000, True) for i in range(200)], cfg)
    >>> d = decide(0.97, EntryEvidence(), t, draw=0.5, config=cfg)
    >>> round(t, 3), d.serve, d.verify
    (0.9, True, False)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EntryEvidence",
    "VerifyConfig",
    "VerifyDecision",
    "decide",
    "global_threshold",
    "wilson_upper",
]

_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class VerifyConfig:
    """Settings of verified mode (built from ``CacheSettings``)."""

    max_error_rate: float
    sample_rate: float = 0.1  # share of served hits verified with a fresh answer
    min_similarity: float = 0.7  # candidates below are never considered (plain misses)
    z: float = 2.326  # one-sided 99 % Wilson bound

    def __post_init__(self) -> None:
        if not 0.0 < self.max_error_rate < 1.0:
            raise ValueError(f"max_error_rate must be in (0, 1), got {self.max_error_rate!r}")
        if not 0.0 <= self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in [0, 1], got {self.sample_rate!r}")
        if not 0.0 <= self.min_similarity <= 1.0:
            raise ValueError(f"min_similarity must be in [0, 1], got {self.min_similarity!r}")


@dataclass(frozen=True, slots=True)
class EntryEvidence:
    """Verification outcomes of one cache entry (bounded: two counts and one similarity)."""

    right: int = 0
    wrong: int = 0
    max_wrong: float = -1.0  # highest similarity at which the entry was verified wrong

    def add(self, similarity: float, correct: bool) -> EntryEvidence:
        """The evidence after one more verification."""
        if correct:
            return EntryEvidence(self.right + 1, self.wrong, self.max_wrong)
        return EntryEvidence(self.right, self.wrong + 1, max(self.max_wrong, similarity))

    @property
    def threshold(self) -> float:
        """Per-entry threshold: above its highest wrong similarity (0 when none)."""
        return self.max_wrong + _EPS if self.wrong else 0.0


@dataclass(frozen=True, slots=True)
class VerifyDecision:
    """Serve the cached answer or compute; verify it (served) or compare (not served)."""

    serve: bool
    verify: bool
    threshold: float  # the threshold that applied to this entry
    reason: str  # 'served', 'served+verify', 'below-threshold', 'entry-wrong-before'


def wilson_upper(errors: int, n: int, z: float) -> float:
    """One-sided Wilson score upper bound of an error rate (1.0 with no observations)."""
    if n <= 0:
        return 1.0
    p = errors / n
    denom = 1 + z * z / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + spread) / denom)


def global_threshold(outcomes: Iterable[tuple[float, bool]], config: VerifyConfig) -> float:
    """The lowest similarity whose verified outcomes at or above it certify the error budget;
    ``inf`` (serve nothing, verify everything) until the evidence certifies one."""
    pairs = list(outcomes)
    if not pairs:
        return math.inf
    sims = np.fromiter((s for s, _ in pairs), dtype=np.float64, count=len(pairs))
    bad = np.fromiter((not ok for _, ok in pairs), dtype=np.float64, count=len(pairs))
    order = np.argsort(-sims, kind="stable")
    sims, bad = sims[order], bad[order]
    n = np.arange(1, sims.size + 1, dtype=np.float64)
    errors = np.cumsum(bad)
    last_of_tie = np.append(sims[1:] != sims[:-1], True)  # t = s takes every tie at s
    z2 = config.z * config.z
    p = errors / n
    upper = (p + z2 / (2 * n) + config.z * np.sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (
        1 + z2 / n)
    ok = last_of_tie & (sims >= config.min_similarity) & (upper <= config.max_error_rate)
    return float(sims[ok].min()) if ok.any() else math.inf


def decide(similarity: float, entry: EntryEvidence, threshold: float, *, draw: float,
           config: VerifyConfig) -> VerifyDecision:
    """What to do with a guard-compatible candidate of ``similarity``. ``threshold`` is
    ``global_threshold(...)``; ``draw`` a uniform [0, 1) draw (policies hold no RNG)."""
    applies = max(threshold, entry.threshold)
    if similarity < applies:
        reason = "entry-wrong-before" if similarity >= threshold else "below-threshold"
        return VerifyDecision(False, True, applies, reason)
    verify = draw < config.sample_rate
    return VerifyDecision(True, verify, applies, "served+verify" if verify else "served")
