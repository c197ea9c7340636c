"""Admission control: whether to shed a request before any work is done (pure decisions).

Two independent rules, both pure functions over immutable inputs:

* :func:`decide_admission` — server-side shedding by priority class, lowest class first: each
  class has a utilisation ceiling and a queue-delay ceiling; a class is shed when it is over
  either, and whenever a class is shed every less urgent class is shed too. A request whose
  class's estimated queue delay already exceeds its remaining budget is shed as well (it would
  miss its deadline anyway; its fallback answers at once instead).
* :func:`throttle_reject_probability` — the SRE book's client-side adaptive throttling formula.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.priority import PRIORITIES, Priority

__all__ = [
    "AdmissionConfig",
    "AdmissionDecision",
    "AdmissionSnapshot",
    "admission_floors",
    "admits_at_once",
    "decide_admission",
    "shed_classes",
    "throttle_reject_probability",
]


class AdmissionConfig(BaseModel):
    """Per-class ceilings, indexed by priority label. Less urgent classes get lower ceilings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_utilization: dict[str, float] = Field(
        default_factory=lambda: {
            "realtime": 1.5,
            "interactive": 1.0,
            "batch": 0.8,
            "background": 0.6,
        },
        description="Shed a class once in-flight / capacity reaches this (>1 lets it queue).",
    )
    max_queue_delay_s: dict[str, float] = Field(
        default_factory=lambda: {
            "realtime": 0.5,
            "interactive": 2.0,
            "batch": 10.0,
            "background": 30.0,
        },
        description="Shed a class once its estimated queue delay exceeds this.",
    )

    @model_validator(mode="after")
    def _check(self) -> AdmissionConfig:
        labels = {p.label for p in Priority}
        for fname in ("max_utilization", "max_queue_delay_s"):
            d = getattr(self, fname)
            if set(d) != labels:
                raise ValueError(
                    f"{fname} needs exactly the classes {sorted(labels)}, got {sorted(d)}"
                )
            bad = {k: v for k, v in d.items() if not v > 0}
            if bad:
                raise ValueError(f"{fname} values must be > 0, got {bad}")
        return self


@dataclass(frozen=True, slots=True)
class AdmissionSnapshot:
    """Load of one pool at one instant.

    ``capacity``: requests it can hold in flight without queueing; ``in_flight``: requests in
    flight per class; ``queue_delay_s``: estimated wait before a new request of each class starts.
    """

    capacity: int
    in_flight: Mapping[Priority, int] = field(default_factory=dict)
    queue_delay_s: Mapping[Priority, float] = field(default_factory=dict)

    @property
    def utilization(self) -> float:
        total = sum(self.in_flight.values())
        return float("inf") if self.capacity <= 0 and total else total / max(self.capacity, 1)


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """``admit`` or shed with a ``reason`` (``overload:<class>`` or ``would_miss_deadline``)."""

    admit: bool
    reason: str | None = None
    shed: frozenset[Priority] = frozenset()


def shed_classes(snapshot: AdmissionSnapshot, config: AdmissionConfig) -> frozenset[Priority]:
    """Classes to shed now: the most urgent class over a ceiling and every class below it."""
    u = snapshot.utilization
    cutoff: Priority | None = None
    for p in PRIORITIES:  # most urgent first: the first one over a ceiling sets the cutoff
        over_util = u >= config.max_utilization[p.label]
        over_delay = snapshot.queue_delay_s.get(p, 0.0) > config.max_queue_delay_s[p.label]
        if over_util or over_delay:
            cutoff = p
            break
    if cutoff is None:
        return frozenset()
    return frozenset(p for p in PRIORITIES if p >= cutoff)


def decide_admission(
    snapshot: AdmissionSnapshot,
    *,
    priority: Priority,
    budget_s: float,
    config: AdmissionConfig,
) -> AdmissionDecision:
    """Admit or shed one request of class ``priority`` with ``budget_s`` seconds left.

    >>> snap = AdmissionSnapshot(capacity=10, in_flight={Priority.BATCH: 9})
    >>> decide_admission(snap, priority=Priority.BACKGROUND, budget_s=1.0,
    ...                  config=AdmissionConfig()).reason
    'overload:batch'
    """
    shed = shed_classes(snapshot, config)
    if priority in shed:
        return AdmissionDecision(False, f"overload:{min(shed).label}", shed)
    if snapshot.queue_delay_s.get(priority, 0.0) > budget_s:
        return AdmissionDecision(False, "would_miss_deadline", shed)
    return AdmissionDecision(True, None, shed)


def admission_floors(config: AdmissionConfig) -> tuple[float, float]:
    """The lowest utilisation ceiling and the lowest queue-delay ceiling over all classes (computed
    once per config, for :func:`admits_at_once`)."""
    return min(config.max_utilization.values()), min(config.max_queue_delay_s.values())


def admits_at_once(floors: tuple[float, float], *, in_flight: int, capacity: int,
                   longest_delay_s: float, budget_s: float) -> bool:
    """A cheap sufficient condition for :func:`decide_admission` to admit, with no snapshot.

    True when the pool's total ``in_flight`` is under every class's utilisation ceiling, the
    longest estimated queue delay of any class (``longest_delay_s``) is within every class's
    delay ceiling, and within the request's ``budget_s``: then no class is over a ceiling, so
    none is shed, and the request's own class waits at most ``longest_delay_s``. False says
    only "decide in full", not "shed".

    >>> admits_at_once((0.6, 0.5), in_flight=3, capacity=10, longest_delay_s=0.01, budget_s=1.0)
    True
    >>> admits_at_once((0.6, 0.5), in_flight=6, capacity=10, longest_delay_s=0.01, budget_s=1.0)
    False
    """
    util_floor, delay_floor = floors
    return (capacity > 0 and in_flight / capacity < util_floor  # as shed_classes divides
            and longest_delay_s <= delay_floor and longest_delay_s <= budget_s)


def throttle_reject_probability(requests: int, accepts: int, k: float) -> float:
    """SRE book, "Handling Overload": ``max(0, (requests - k * accepts) / (requests + 1))``.

    ``requests``: attempts by the client in the window (including locally rejected ones);
    ``accepts``: those the backend accepted. ``k`` (typically 2) is how much more than the
    accepted rate the client still sends.
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k}")
    return max(0.0, (requests - k * accepts) / (requests + 1))
