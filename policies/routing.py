"""Route strategies: which of a route's models run, decided from data, executed by the router.

A *route* is a virtual model (e.g. ``digits``) over a cheap and an expensive model. Strategies
are chosen by name from one registry (``make_strategy``). Each supplies one **score** in [0, 1]
("how likely the cheap model is good enough"); the rule turning a score into a decision lives
once, in ``RouteStrategy.escalate``: escalate iff ``score < threshold`` (RouteLLM style), and
thresholds are calibrated with ``policies.calibration``.

The router drives a strategy in two calls, data in -> decision out:

1. ``plan(request) -> RoutePlan``: before anything runs. ``plan.kind`` says what to execute:
   ``SINGLE`` (run ``plan.first`` and answer), ``CASCADE`` (run ``plan.first`` = cheap, then
   ask ``after_cheap``), ``REFINE`` (run ``plan.first``, emit it as a non-final answer, then
   run ``plan.then`` and emit the final answer). ``plan.shadow`` asks the router to also run the
   other model and log the outcome (training data for the predictive router); it never changes
   the answer.
2. ``after_cheap(cheap_logits, request) -> Verdict`` (``CASCADE`` plans only): escalate or
   accept, with the confidence and a per-row mask. The router may send only the escalated rows
   to the expensive model and combine with ``merge_rows``.

Strategies: ``static`` (always one model), ``cascade`` (cheap first, escalate when its
confidence, max softmax or top-2 margin, is below the threshold), ``predictive`` (a learned
``LinearScorer`` decides before running anything; with ``uses_cheap=True`` it scores after the
cheap model instead), ``fast-then-refine`` (cheap answer first, then the expensive one).

Example::

    s = make_strategy("cascade", cheap="digits-small", expensive="digits-large", threshold=0.9)
    plan = s.plan(RouteRequest(inputs={"pixels": x}))        # CASCADE: run digits-small
    verdict = s.after_cheap(cheap_logits)                      # escalate? confidence?
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from policies.priority import Priority

__all__ = [
    "CONFIDENCE_MEASURES",
    "CascadeStrategy",
    "FastThenRefineStrategy",
    "LinearScorer",
    "PlanKind",
    "PredictiveStrategy",
    "RoutePlan",
    "RouteRequest",
    "RouteStrategy",
    "StaticStrategy",
    "TEXT_FEATURE",
    "Verdict",
    "cheap_features",
    "confidence",
    "flatten_inputs",
    "make_strategy",
    "merge_rows",
    "strategy_names",
]

TEXT_FEATURE = "text_embedding"
"""Input name under which a scorer reads the request text's embedding (the router adds it)."""

ConfidenceMeasure = Literal["max_softmax", "margin"]
CONFIDENCE_MEASURES: tuple[str, ...] = ("max_softmax", "margin")


# -- data in / decisions out ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RouteRequest:
    """What a strategy sees of a request before anything runs.

    ``shadow_draw`` is a uniform [0, 1) draw supplied by the caller (policies hold no RNG): the
    request is shadowed when ``shadow_draw < shadow_rate``.
    """

    inputs: Mapping[str, np.ndarray]
    priority: Priority = Priority.INTERACTIVE
    deadline_s: float | None = None
    shadow_draw: float = 1.0


class PlanKind(str, enum.Enum):
    SINGLE = "single"  # run `first`, answer with it
    CASCADE = "cascade"  # run `first` (cheap), then after_cheap() decides on `then`
    REFINE = "refine"  # run `first`, emit it (final=False), run `then`, emit it (final=True)


@dataclass(frozen=True, slots=True)
class RoutePlan:
    """What to execute. ``decision`` uses RouteInfo's words: 'cheap', 'expensive', 'cascade'
    (pending after_cheap), 'refine'. ``score`` is the pre-run score when the strategy has one."""

    kind: PlanKind
    first: str
    then: str | None
    decision: str
    strategy: str
    score: float | None = None
    threshold: float | None = None
    shadow: bool = False

    @property
    def models(self) -> tuple[str, ...]:
        """Models this plan may run, in order."""
        return (self.first,) if self.then is None else (self.first, self.then)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Decision after the cheap model ran: escalate to ``expensive`` or accept the cheap answer.

    ``rows`` marks the rows to escalate (multi-row requests); ``confidence`` is the lowest row
    score (the one that matters for the request)."""

    escalate: bool
    confidence: float
    threshold: float
    rows: tuple[bool, ...]
    decision: str  # 'escalated' | 'cheap'


# -- scores --------------------------------------------------------------------------------------
def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim == 1:
        z = z[None, :]
    z = z.reshape(z.shape[0], -1)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def confidence(logits: np.ndarray, measure: str = "max_softmax") -> np.ndarray:
    """Per-row confidence of a classifier's logits ([n, k] or [k]) in [0, 1].

    ``max_softmax``: the top class probability. ``margin``: top-1 minus top-2 probability.
    """
    p = _softmax(logits)
    if measure == "max_softmax":
        return p.max(axis=1)
    if measure == "margin":
        if p.shape[1] < 2:
            return np.ones(p.shape[0])
        top2 = np.sort(p, axis=1)[:, -2:]
        return top2[:, 1] - top2[:, 0]
    raise ValueError(f"confidence measure must be one of {', '.join(CONFIDENCE_MEASURES)}, "
                     f"got {measure!r}")


def cheap_features(logits: np.ndarray) -> np.ndarray:
    """Features of the cheap model's output for the learned scorer: [max_softmax, margin,
    normalised entropy] per row."""
    p = _softmax(logits)
    ent = -(p * np.log(np.clip(p, 1e-12, 1.0))).sum(axis=1) / np.log(max(p.shape[1], 2))
    return np.stack([confidence(logits, "max_softmax"), confidence(logits, "margin"), ent], 1)


def flatten_inputs(inputs: Mapping[str, np.ndarray], names: tuple[str, ...]) -> np.ndarray:
    """Concatenate the named inputs into one [rows, features] float64 matrix."""
    missing = [n for n in names if n not in inputs]
    if missing:
        raise ValueError(f"inputs: the route's scorer needs {list(names)}, missing {missing}")
    parts = []
    for n in names:
        a = np.asarray(inputs[n], dtype=np.float64)
        parts.append(a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(1, -1))
    return np.concatenate(parts, axis=1)


@dataclass(frozen=True, slots=True)
class LinearScorer:
    """Logistic-regression scorer: P(cheap answer is good enough | features).

    Features are the flattened ``input_names`` inputs, plus ``cheap_features`` of the cheap
    model's logits when ``uses_cheap``. Standardised with ``mean``/``scale`` before the dot
    product. Built by ``router.route_training``; stored as safetensors (never pickle).
    """

    weight: np.ndarray = field(repr=False)
    bias: float
    mean: np.ndarray = field(repr=False)
    scale: np.ndarray = field(repr=False)
    input_names: tuple[str, ...]
    uses_cheap: bool = False

    def __post_init__(self) -> None:
        n = self.weight.shape[0]
        if self.mean.shape != (n,) or self.scale.shape != (n,):
            raise ValueError(f"LinearScorer: weight has {n} features but mean/scale have "
                             f"{self.mean.shape}/{self.scale.shape}")

    def features(self, inputs: Mapping[str, np.ndarray], cheap_logits: np.ndarray | None = None
                 ) -> np.ndarray:
        x = flatten_inputs(inputs, self.input_names)
        if self.uses_cheap:
            if cheap_logits is None:
                raise ValueError("LinearScorer.uses_cheap: cheap_logits are required")
            x = np.concatenate([x, cheap_features(cheap_logits)], axis=1)
        return x

    def score_matrix(self, x: np.ndarray) -> np.ndarray:
        """Scores for a [rows, features] matrix already built by ``features``."""
        if x.shape[1] != self.weight.shape[0]:
            raise ValueError(f"LinearScorer: expected {self.weight.shape[0]} features, got "
                             f"{x.shape[1]} (wrong inputs for this scorer?)")
        z = ((x - self.mean) / self.scale) @ self.weight + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))

    def score(self, inputs: Mapping[str, np.ndarray], cheap_logits: np.ndarray | None = None
              ) -> np.ndarray:
        """Per-row scores in [0, 1]."""
        return self.score_matrix(self.features(inputs, cheap_logits))


def merge_rows(cheap: np.ndarray, expensive: np.ndarray, rows: tuple[bool, ...]) -> np.ndarray:
    """Cheap outputs with the escalated ``rows`` replaced by the expensive model's outputs.

    ``expensive`` holds either every row or only the escalated rows, in order.
    """
    mask = np.asarray(rows, dtype=bool)
    out = np.array(cheap, copy=True)
    exp = np.asarray(expensive)
    out[mask] = exp[mask] if exp.shape[0] == mask.shape[0] else exp
    return out


# -- strategies ----------------------------------------------------------------------------------
class RouteStrategy:
    """Base class. Subclasses set ``name`` and implement ``plan``; score-based ones implement
    ``cheap_scores``. The threshold rule (``escalate``) exists only here."""

    name: ClassVar[str] = ""

    def __init__(self, *, cheap: str | None, expensive: str | None, threshold: float | None = None,
                 shadow_rate: float = 0.0) -> None:
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {threshold!r}")
        if not 0.0 <= shadow_rate <= 1.0:
            raise ValueError(f"shadow_rate must be within [0, 1], got {shadow_rate!r}")
        self.cheap = cheap
        self.expensive = expensive
        self.threshold = threshold
        self.shadow_rate = shadow_rate

    @property
    def reads_text(self) -> bool:
        """Whether ``plan`` needs the request text's embedding (input ``TEXT_FEATURE``)."""
        return False

    def escalate(self, scores: np.ndarray) -> np.ndarray:
        """The one rule: a row goes to the expensive model iff its score < threshold."""
        if self.threshold is None:
            raise ValueError(f"strategy {self.name!r} has no threshold")
        return np.asarray(scores, dtype=np.float64) < self.threshold

    def plan(self, request: RouteRequest) -> RoutePlan:
        raise NotImplementedError

    def cheap_scores(self, inputs: Mapping[str, np.ndarray], cheap_logits: np.ndarray
                     ) -> np.ndarray:
        """Per-row scores once the cheap model ran (cascade-type strategies)."""
        raise NotImplementedError(f"strategy {self.name!r} does not score after the cheap model")

    def after_cheap(self, cheap_logits: np.ndarray, request: RouteRequest | None = None
                    ) -> Verdict:
        """Escalate or accept after the cheap model ran (only for CASCADE plans)."""
        inputs = request.inputs if request is not None else {}
        scores = self.cheap_scores(inputs, cheap_logits)
        esc = self.escalate(scores)
        return Verdict(
            escalate=bool(esc.any()), confidence=float(scores.min()),
            threshold=float(self.threshold or 0.0), rows=tuple(bool(e) for e in esc),
            decision="escalated" if esc.any() else "cheap",
        )

    def _shadow(self, request: RouteRequest) -> bool:
        return request.shadow_draw < self.shadow_rate

    def _cascade_plan(self, request: RouteRequest) -> RoutePlan:
        assert self.cheap and self.expensive
        return RoutePlan(PlanKind.CASCADE, self.cheap, self.expensive, "cascade", self.name,
                         threshold=self.threshold, shadow=self._shadow(request))


class StaticStrategy(RouteStrategy):
    """Always one model (``use``: 'expensive' by default, or 'cheap')."""

    name = "static"

    def __init__(self, *, cheap: str | None = None, expensive: str | None = None,
                 use: Literal["cheap", "expensive"] | None = None, **kw: Any) -> None:
        super().__init__(cheap=cheap, expensive=expensive, **kw)
        use = use or ("expensive" if expensive else "cheap")
        model = expensive if use == "expensive" else cheap
        if not model:
            raise ValueError(f"static route: use={use!r} but no {use!r} model is configured")
        self.use, self.model = use, model

    def plan(self, request: RouteRequest) -> RoutePlan:
        return RoutePlan(PlanKind.SINGLE, self.model, None, self.use, self.name)


class CascadeStrategy(RouteStrategy):
    """Run cheap; escalate rows whose confidence is below the threshold."""

    name = "cascade"

    def __init__(self, *, cheap: str, expensive: str, threshold: float = 0.9,
                 confidence: str = "max_softmax", **kw: Any) -> None:
        super().__init__(cheap=cheap, expensive=expensive, threshold=threshold, **kw)
        if confidence not in CONFIDENCE_MEASURES:
            raise ValueError(f"confidence must be one of {', '.join(CONFIDENCE_MEASURES)}, "
                             f"got {confidence!r}")
        self.measure = confidence

    def plan(self, request: RouteRequest) -> RoutePlan:
        return self._cascade_plan(request)

    def cheap_scores(self, inputs: Mapping[str, np.ndarray], cheap_logits: np.ndarray
                     ) -> np.ndarray:
        return confidence(cheap_logits, self.measure)


class PredictiveStrategy(RouteStrategy):
    """A learned scorer decides before anything runs (or after cheap, if it uses cheap features)."""

    name = "predictive"

    def __init__(self, *, cheap: str, expensive: str, scorer: LinearScorer,
                 threshold: float = 0.5, **kw: Any) -> None:
        super().__init__(cheap=cheap, expensive=expensive, threshold=threshold, **kw)
        self.scorer = scorer

    @property
    def reads_text(self) -> bool:
        return TEXT_FEATURE in self.scorer.input_names

    def plan(self, request: RouteRequest) -> RoutePlan:
        if self.scorer.uses_cheap:
            return self._cascade_plan(request)
        assert self.cheap and self.expensive
        score = float(self.scorer.score(request.inputs).min())
        esc = bool(self.escalate(np.array([score]))[0])
        model, decision = (self.expensive, "expensive") if esc else (self.cheap, "cheap")
        return RoutePlan(PlanKind.SINGLE, model, None, decision, self.name, score=score,
                         threshold=self.threshold, shadow=self._shadow(request))

    def cheap_scores(self, inputs: Mapping[str, np.ndarray], cheap_logits: np.ndarray
                     ) -> np.ndarray:
        if not self.scorer.uses_cheap:
            return super().cheap_scores(inputs, cheap_logits)
        return self.scorer.score(inputs, cheap_logits)


class FastThenRefineStrategy(RouteStrategy):
    """Cheap answer first (``final=False``), then the expensive one (``final=True``)."""

    name = "fast-then-refine"

    def __init__(self, *, cheap: str, expensive: str, **kw: Any) -> None:
        super().__init__(cheap=cheap, expensive=expensive, **kw)

    def plan(self, request: RouteRequest) -> RoutePlan:
        assert self.cheap and self.expensive
        return RoutePlan(PlanKind.REFINE, self.cheap, self.expensive, "refine", self.name)


_REGISTRY: dict[str, Callable[..., RouteStrategy]] = {
    cls.name: cls
    for cls in (StaticStrategy, CascadeStrategy, PredictiveStrategy, FastThenRefineStrategy)
}


def strategy_names() -> tuple[str, ...]:
    """Valid strategy names, for config validation and error messages."""
    return tuple(_REGISTRY)


def make_strategy(name: str, **kwargs: Any) -> RouteStrategy:
    """Build a strategy by registry name; unknown names raise ``ValueError`` listing valid ones.

    Keyword arguments are the strategy's constructor arguments (cheap, expensive, threshold,
    confidence, scorer, use, shadow_rate).
    """
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown route strategy {name!r}; valid: "
                         f"{', '.join(strategy_names())}") from None
    return cls(**kwargs)
