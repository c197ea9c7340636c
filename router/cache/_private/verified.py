"""State of verified mode (``policies.verified_cache`` decides; this object remembers).

Bounded: per-entry evidence for at most ``max_entries`` entries (least recently touched dropped)
and the last ``window`` verification outcomes for the global threshold. The global threshold is
recomputed when an outcome arrives, not per lookup.
"""

from __future__ import annotations

import random
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from policies.verified_cache import (
    EntryEvidence,
    VerifyConfig,
    VerifyDecision,
    decide,
    global_threshold,
)
from router.cache.types import Answer

__all__ = ["Verifier", "VerifierStatus", "same_answer"]


def same_answer(a: Answer, b: Answer, *, rtol: float = 1e-3,
                atol: float = 1e-5) -> bool:
    """Whether a fresh answer confirms a cached one: same outputs, values within tolerance."""
    if set(a.outputs) != set(b.outputs):
        return False
    for name, x in a.outputs.items():
        xa, xb = np.asarray(x), np.asarray(b.outputs[name])
        if xa.shape != xb.shape:
            return False
        if xa.dtype.kind in "fc" or xb.dtype.kind in "fc":
            if not np.allclose(xa, xb, rtol=rtol, atol=atol, equal_nan=True):
                return False
        elif not np.array_equal(xa, xb):
            return False
    return True


@dataclass(frozen=True, slots=True)
class VerifierStatus:
    """What ``/v2/status`` and the metric report about verified mode."""

    max_error_rate: float
    threshold: float | None  # None while no threshold is certified (nothing served yet)
    verified_hits: int  # served hits compared with a fresh answer
    wrong_hits: int  # of those, how many the fresh answer contradicted
    explored: int  # candidates not served, compared for free after computing
    entries: int

    @property
    def observed_error_rate(self) -> float | None:
        """Wrong / verified among served hits (None before the first verification)."""
        return self.wrong_hits / self.verified_hits if self.verified_hits else None

    def as_dict(self) -> dict[str, float | int | None]:
        return {"max_error_rate": self.max_error_rate, "threshold": self.threshold,
                "verified_hits": self.verified_hits, "wrong_hits": self.wrong_hits,
                "observed_error_rate": self.observed_error_rate, "explored": self.explored,
                "entries": self.entries}


class Verifier:
    """Per-entry evidence and the verification window of one ``ResultCache``."""

    def __init__(self, config: VerifyConfig, *, window: int = 5000, max_entries: int = 100_000,
                 rng: Callable[[], float] = random.random) -> None:
        self.config = config
        self._rng = rng
        self._entries: OrderedDict[Hashable, EntryEvidence] = OrderedDict()
        self._max_entries = max_entries
        self._outcomes: deque[tuple[float, bool]] = deque(maxlen=window)
        self._threshold = global_threshold((), config)
        self._verified = self._wrong = self._explored = 0

    def decide(self, entry: Hashable, similarity: float) -> VerifyDecision:
        """Serve or compute a candidate of ``similarity`` from cache entry ``entry``."""
        evidence = self._entries.get(entry, EntryEvidence())
        return decide(similarity, evidence, self._threshold, draw=self._rng(),
                      config=self.config)

    def record(self, entry: Hashable, similarity: float, correct: bool, *, served: bool) -> None:
        """One verification outcome: ``served`` hits count toward the observed error rate."""
        self._entries[entry] = self._entries.get(entry, EntryEvidence()).add(similarity, correct)
        self._entries.move_to_end(entry)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        self._outcomes.append((similarity, correct))
        self._threshold = global_threshold(self._outcomes, self.config)
        if served:
            self._verified += 1
            self._wrong += not correct
        else:
            self._explored += 1

    def status(self) -> VerifierStatus:
        t = self._threshold if np.isfinite(self._threshold) else None
        return VerifierStatus(self.config.max_error_rate, t, self._verified, self._wrong,
                              self._explored, len(self._entries))
