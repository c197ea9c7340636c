"""Admission control: whether to shed a request before any work is done (pure decisions).

**One rule, fed three views of the load** (:func:`shed_reason`). A request of class ``p`` is
shed as ``overload:<class>`` when a count cap binds or its expected queue passes the class's
latency objective (optional per class: :data:`DEFAULT_OBJECTIVES`, only realtime has one by
default), and as ``would_miss_deadline`` when the queue it cannot avoid would make it miss a
deadline it could meet on an idle backend. Who feeds it:

* the edge (``policies.edge.decide_edge``, every front door: HTTP, gRPC, the handle): the work
  in flight ahead times the backend's measured seconds per request, stretched by the more
  urgent work still to come for the objective; its caps are shares of ``max_in_flight``;
* the pipeline (:func:`decide_admission`, per pool, before the call): the pool's own published
  wait for the class (``RoutingStats.queue_delay_s``, the device's estimate, every replica),
  with per-class utilisation caps of the pool's capacity (lowest class first);
* the device's triage (``policies.scheduling``): the same deadline test on its exact queue.

The objectives are the operator's, set once (``edge.admission.max_queue_delay_s``) and read by
the edge and the pipeline alike.

:func:`throttle_reject_probability` is the SRE book's client-side adaptive throttling formula.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.priority import PRIORITIES, Priority

__all__ = [
    "DEFAULT_OBJECTIVES",
    "AdmissionConfig",
    "AdmissionDecision",
    "AdmissionSnapshot",
    "admission_floors",
    "admits_at_once",
    "decide_admission",
    "check_objectives",
    "shed_classes",
    "shed_reason",
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

    @model_validator(mode="after")
    def _check(self) -> AdmissionConfig:
        labels = {p.label for p in Priority}
        d = self.max_utilization
        if set(d) != labels:
            raise ValueError(
                f"max_utilization needs exactly the classes {sorted(labels)}, got {sorted(d)}")
        bad = {k: v for k, v in d.items() if not v > 0}
        if bad:
            raise ValueError(f"max_utilization values must be > 0, got {bad}")
        return self


# Latency objectives (seconds of queue) per class label; None: the deadline alone.
Objectives = Mapping[str, "float | None"]
DEFAULT_OBJECTIVES: Objectives = {"realtime": 0.08, "interactive": None, "batch": None,
                                  "background": None}


def check_objectives(objectives: Objectives) -> None:
    """Raise ValueError unless ``objectives`` names every class, each > 0 or None, none looser
    than a more urgent class's, and realtime has one whenever another class has."""
    labels = [p.label for p in Priority]
    if set(objectives) != set(labels):
        raise ValueError(f"max_queue_delay_s needs exactly the classes {labels}, "
                         f"got {sorted(objectives)}")
    bad = {k: v for k, v in objectives.items() if v is not None and not v > 0}
    if bad:
        raise ValueError(f"max_queue_delay_s values must be > 0, got {bad}")
    given = [v for v in (objectives[label] for label in labels) if v is not None]
    if given != sorted(given, reverse=True):
        # among the classes with an objective, a less urgent one may not be looser
        raise ValueError(f"max_queue_delay_s must not grow from realtime to background "
                         f"(among the classes that set one), got {dict(objectives)}")
    if objectives["realtime"] is None and given:
        raise ValueError("max_queue_delay_s: a less urgent class may not have a latency "
                         "objective while realtime has none")


def shed_reason(priority: Priority, *, over_cap: Priority | None, queued_s: float,
                expected_s: float, service_s: float, elapsed_s: float, deadline_s: float,
                objective_s: float | None, margin_s: float) -> str | None:
    """The one admission rule; None admits.

    ``over_cap``: the class whose count cap sheds this request (None: none does);
    ``queued_s``: the queue the request cannot avoid; ``expected_s``: the queue it should
    expect (``queued_s`` stretched by the more urgent work still to come, where known);
    ``service_s``: its own service time; ``elapsed_s`` / ``deadline_s``: since arrival / its
    whole budget; ``objective_s``: its class's latency objective (None: none).

    Shed for the deadline only when the queue is what makes it miss (a deadline too tight even
    for an idle backend goes on to its labelled fallback) and only when it must miss: a request
    let through that then cannot make it is refused by the device's triage before it runs,
    which costs the backend nothing; one shed that would have made it is lost.

    >>> shed_reason(Priority.BATCH, over_cap=None, queued_s=0.3, expected_s=0.9,
    ...             service_s=0.02, elapsed_s=0.0, deadline_s=0.5, objective_s=None,
    ...             margin_s=0.005) is None
    True
    >>> shed_reason(Priority.REALTIME, over_cap=None, queued_s=0.1, expected_s=0.1,
    ...             service_s=0.02, elapsed_s=0.0, deadline_s=0.5, objective_s=0.08,
    ...             margin_s=0.005)
    'overload:realtime'
    """
    if over_cap is not None:
        return f"overload:{over_cap.label}"
    if objective_s is not None and expected_s > objective_s:
        return f"overload:{priority.label}"
    unloaded_s = elapsed_s + service_s + margin_s
    if unloaded_s <= deadline_s < unloaded_s + queued_s:
        return "would_miss_deadline"
    return None


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
    """Classes the pool's count caps shed now: the most urgent class whose utilisation ceiling
    is reached, and every class below it."""
    u = snapshot.utilization
    cutoff: Priority | None = None
    for p in PRIORITIES:  # most urgent first: the first one over a ceiling sets the cutoff
        if u >= config.max_utilization[p.label]:
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
    objectives: Objectives = DEFAULT_OBJECTIVES,
    margin_s: float = 0.0,
) -> AdmissionDecision:
    """Admit or shed one request of class ``priority`` with ``budget_s`` seconds left, by
    :func:`shed_reason` over the pool's view: its published wait for the class (the device's
    own estimate of the queue ahead) and its utilisation caps.

    >>> snap = AdmissionSnapshot(capacity=10, in_flight={Priority.BATCH: 9})
    >>> decide_admission(snap, priority=Priority.BACKGROUND, budget_s=1.0,
    ...                  config=AdmissionConfig()).reason
    'overload:batch'
    """
    shed = shed_classes(snapshot, config)
    wait = snapshot.queue_delay_s.get(priority, 0.0)
    reason = shed_reason(priority, over_cap=min(shed) if priority in shed else None,
                         queued_s=wait, expected_s=wait, service_s=0.0, elapsed_s=0.0,
                         deadline_s=budget_s, objective_s=objectives[priority.label],
                         margin_s=margin_s)
    return AdmissionDecision(reason is None, reason, shed)


def admission_floors(config: AdmissionConfig,
                     objectives: Objectives = DEFAULT_OBJECTIVES) -> tuple[float, float]:
    """The lowest utilisation ceiling and the lowest latency objective over all classes (inf
    when none has one), computed once per config, for :func:`admits_at_once`."""
    given = [v for v in objectives.values() if v is not None]
    return min(config.max_utilization.values()), min(given, default=math.inf)


def admits_at_once(floors: tuple[float, float], *, in_flight: int, capacity: int,
                   longest_delay_s: float, budget_s: float, margin_s: float = 0.0) -> bool:
    """A cheap sufficient condition for :func:`decide_admission` to admit, with no snapshot.

    True when the pool's total ``in_flight`` is under every class's utilisation ceiling, the
    longest estimated queue delay of any class (``longest_delay_s``) is within every class's
    latency objective, and within the request's ``budget_s`` less ``margin_s``: then no cap
    binds, no objective is passed, and the request's own class waits at most
    ``longest_delay_s``. False says only "decide in full", not "shed".

    >>> admits_at_once((0.6, 0.5), in_flight=3, capacity=10, longest_delay_s=0.01, budget_s=1.0)
    True
    >>> admits_at_once((0.6, 0.5), in_flight=6, capacity=10, longest_delay_s=0.01, budget_s=1.0)
    False
    """
    util_floor, delay_floor = floors
    return (capacity > 0 and in_flight / capacity < util_floor  # as shed_classes divides
            and longest_delay_s <= delay_floor and longest_delay_s + margin_s <= budget_s)


def throttle_reject_probability(requests: int, accepts: int, k: float) -> float:
    """SRE book, "Handling Overload": ``max(0, (requests - k * accepts) / (requests + 1))``.

    ``requests``: attempts by the client in the window (including locally rejected ones);
    ``accepts``: those the backend accepted. ``k`` (typically 2) is how much more than the
    accepted rate the client still sends.
    """
    if k <= 0:
        raise ValueError(f"k must be > 0, got {k}")
    return max(0.0, (requests - k * accepts) / (requests + 1))
