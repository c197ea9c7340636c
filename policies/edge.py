"""Edge admission: the cheap decisions taken before a request body is decoded (pure).

The HTTP edge (``router.edge``) knows, for each request, its priority class, its deadline and
when it arrived; it keeps, for the work it has let through, the number in flight per class and a
measured service time (seconds of backend capacity one request costs, i.e. 1 / throughput). From
those alone it decides, in microseconds, whether to let a request through:

* **Overload, lowest class first.** The backend serves the most urgent class first, so a new
  request of class ``p`` waits behind the in-flight work of classes at least as urgent as ``p``
  plus the one request already running, and behind the more urgent work that arrives meanwhile.
  Its predicted queue delay is that count times the service time, divided by the share of the
  backend the more urgent classes leave free (``1 - sigma``, sigma = their admitted rate times the
  service time: the M/G/1 priority-queue waiting-time factor), so when realtime alone fills the
  backend, interactive is shed rather than realtime. A class is shed once its predicted delay
  passes its latency objective (``max_queue_delay_s``, where it has one), or once the total in
  flight passes its share of ``max_in_flight``. Less urgent classes count more work ahead of
  them and have smaller shares, so batch is shed before interactive, and interactive before
  realtime.
* **No fixed ceiling but the caller's deadline, by default.** Only realtime has a latency
  objective (80 ms of queue); every other class is let through whenever its predicted delay
  leaves it time to finish within its deadline (below). With fixed ceilings (80/80/60/40 ms in
  ``benchmarks.overload_http``) the edge shed a quarter of the goodput at 1x capacity: work
  that the 500 ms deadline still allowed (``docs/OVERLOAD.md``).
* **The service time is the backend's** (``router.edge_state``): gaps between answers the
  backend computed, not between cache hits or fallback answers to requests the pool refused.
* **Bursts are not overload.** The in-flight share binds at once only on a standing backlog (as
  CoDel tells a standing queue from a burst): one whose fewest in flight over the last
  ``standing_window_s`` reached half the share. A burst on a queue that was short (a pause of the
  host, the loop or a client) may reach ``burst_factor`` times the share: it costs latency while
  it drains, not 503s. Under the bare share a fast model at about 40 % of its capacity answered
  179 requests with 503 during a stall of the host, at predicted delays of 11-31 ms
  (docs/PERFORMANCE.md, twelfth session of 2026-11-24).
* **Deadline.** A request whose elapsed time (since arrival) plus the queue it cannot avoid
  (the work in flight ahead of it, :func:`queued_s`) plus one service time is past its deadline
  is answered at once instead of queueing.
* **Slow bodies.** A body must arrive within a total timeout and at a minimum rate after a grace
  period; :func:`body_wait_s` says how long the edge may wait for the next bytes.

Everything here is a function of immutable inputs; the clock and the counters live in the edge.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.admission import DEFAULT_OBJECTIVES, check_objectives, shed_reason
from policies.priority import Priority

__all__ = [
    "EdgeConfig",
    "EdgeDecision",
    "EdgeSnapshot",
    "admits_at_once",
    "body_wait_s",
    "decide_edge",
    "fallback_affordable",
    "in_flight_cap",
    "predicted_delay_s",
    "queued_s",
    "retry_after_s",
]

_LABELS = tuple(p.label for p in Priority)


class EdgeConfig(BaseModel):
    """Ceilings of the edge's admission, per priority class where it matters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_in_flight: int = Field(
        32, ge=1, description="Work let through the edge and not yet answered, all classes. "
                              "About capacity (req/s) x deadline (s): more cannot finish in time.")
    in_flight_share: dict[str, float] = Field(
        default_factory=lambda: {"realtime": 1.0, "interactive": 0.75, "batch": 0.5,
                                 "background": 0.25},
        description="A class is shed once the total in flight reaches share x max_in_flight.")
    max_queue_delay_s: dict[str, float | None] = Field(
        default_factory=lambda: dict(DEFAULT_OBJECTIVES),
        description="A class's latency objective: it is shed once its predicted queue delay "
                    "passes this (seconds). None: no objective but the request's own deadline "
                    "(a request is shed only when the queue would make it miss). By default only "
                    "realtime has one, 80 ms: a realtime caller wants a fast answer, and its "
                    "labelled fallback at once beats a model answer after a long queue; every "
                    "other class is let through whenever the queue leaves it time to finish.")
    burst_factor: float = Field(
        2.0, ge=1.0, description="A burst on a backlog that was not standing may reach this many "
                                 "times a class's in-flight share before it is shed (1 = the "
                                 "share always binds at once).")
    standing_window_s: float = Field(
        0.1, gt=0, description="A backlog stands once its fewest in flight over about this long "
                               "(seconds) reached half a class's in-flight share.")
    deadline_margin_s: float = Field(
        0.005, ge=0, description="Kept back when judging whether a deadline can still be met.")
    body_timeout_s: float = Field(10.0, gt=0, description="Whole body must arrive within this.")
    body_grace_s: float = Field(1.0, gt=0, description="No minimum rate before this (seconds).")
    body_min_rate_bps: float = Field(
        16_384.0, gt=0, description="After the grace, a body slower than this (bytes/s) is cut.")

    @model_validator(mode="after")
    def _check(self) -> EdgeConfig:
        shares = self.in_flight_share
        if set(shares) != set(_LABELS):
            raise ValueError(f"in_flight_share needs exactly the classes {list(_LABELS)}, "
                             f"got {sorted(shares)}")
        bad = {k: v for k, v in shares.items() if not v > 0}
        if bad:
            raise ValueError(f"in_flight_share values must be > 0, got {bad}")
        values = [shares[label] for label in _LABELS]
        if values != sorted(values, reverse=True):
            # a less urgent class with a larger share could be let in while a more urgent one
            # is shed
            raise ValueError(f"in_flight_share must not grow from realtime to background, "
                             f"got {shares}")
        check_objectives(self.max_queue_delay_s)
        if self.body_grace_s > self.body_timeout_s:
            raise ValueError(f"body_grace_s ({self.body_grace_s}) must not exceed "
                             f"body_timeout_s ({self.body_timeout_s})")
        return self


@dataclass(frozen=True, slots=True)
class EdgeSnapshot:
    """The edge's view at one instant: work in flight per class, seconds per request, the
    rate (per second) at which each class has recently been let through, and ``standing``: the
    fewest in flight (all classes) over the last window (None: unknown, every backlog stands)."""

    in_flight: Mapping[Priority, int] = field(default_factory=dict)
    service_s: float = 0.0
    admitted_rate: Mapping[Priority, float] = field(default_factory=dict)
    standing: int | None = None

    @property
    def total(self) -> int:
        return sum(self.in_flight.values())


@dataclass(frozen=True, slots=True)
class EdgeDecision:
    """``admit``, or shed with ``reason`` (``overload:<class>`` / ``would_miss_deadline``),
    ``status`` (503) and ``retry_after_s`` (whole seconds, for the Retry-After header)."""

    admit: bool
    reason: str | None = None
    predicted_delay_s: float = 0.0
    status: int = 503
    retry_after_s: int = 1


_MIN_FREE = 0.05  # below 5 % of the backend left by more urgent classes: predicted 20x


def predicted_delay_s(snapshot: EdgeSnapshot, priority: Priority) -> float:
    """Queue delay a new request of ``priority`` would see: the in-flight work of classes at
    least as urgent, plus the one request of a less urgent class already running (if any),
    stretched by the more urgent work still arriving (``1 / (1 - sigma)``)."""
    sigma = sum(r for p, r in snapshot.admitted_rate.items() if p < priority) * snapshot.service_s
    return queued_s(snapshot, priority) / max(1.0 - sigma, _MIN_FREE)


def queued_s(snapshot: EdgeSnapshot, priority: Priority) -> float:
    """The queue delay a new request of ``priority`` cannot avoid: the in-flight work of
    classes at least as urgent plus the one running below (no stretch for work to come)."""
    ahead = sum(n for p, n in snapshot.in_flight.items() if p <= priority)
    running_below = any(n > 0 for p, n in snapshot.in_flight.items() if p > priority)
    return (ahead + (1 if running_below else 0)) * snapshot.service_s


def retry_after_s(snapshot: EdgeSnapshot) -> int:
    """Whole seconds until the work in flight now has drained (at least 1)."""
    return max(1, math.ceil(snapshot.total * snapshot.service_s))


def decide_edge(snapshot: EdgeSnapshot, *, priority: Priority, elapsed_s: float,
                deadline_s: float, config: EdgeConfig) -> EdgeDecision:
    """Let one request of class ``priority`` through, or shed it.

    ``elapsed_s``: time since it arrived; ``deadline_s``: its whole budget from arrival.

    >>> snap = EdgeSnapshot({Priority.REALTIME: 2, Priority.BATCH: 20}, service_s=0.02)
    >>> decide_edge(snap, priority=Priority.BATCH, elapsed_s=0.0, deadline_s=1.0,
    ...             config=EdgeConfig()).reason
    'overload:batch'
    >>> decide_edge(snap, priority=Priority.REALTIME, elapsed_s=0.0, deadline_s=1.0,
    ...             config=EdgeConfig()).admit
    True
    """
    delay = predicted_delay_s(snapshot, priority)
    label = priority.label
    # the one rule (policies.admission): the edge's view is the work in flight ahead times
    # the backend's seconds per request; the objective reads the stretched (expected) queue,
    # the deadline only the queue the request cannot avoid
    reason = shed_reason(
        priority, over_cap=priority if snapshot.total >= in_flight_cap(snapshot, label, config)
        else None, queued_s=queued_s(snapshot, priority), expected_s=delay,
        service_s=snapshot.service_s, elapsed_s=elapsed_s, deadline_s=deadline_s,
        objective_s=config.max_queue_delay_s[label], margin_s=config.deadline_margin_s)
    if reason is None:
        return EdgeDecision(True, None, delay)
    return EdgeDecision(False, reason, delay, retry_after_s=retry_after_s(snapshot))


def admits_at_once(*, total: int, service_s: float, priority: Priority, elapsed_s: float,
                   deadline_s: float, config: EdgeConfig) -> bool:
    """A sufficient condition for :func:`decide_edge` to admit, from two numbers the edge
    keeps current (``total`` in flight, ``service_s``), without building a snapshot.

    It holds when fewer requests are in flight than the class's share of ``max_in_flight``
    (the cap is that share or more), and the worst delay the snapshot could predict is within
    both the class's ceiling and the request's budget. That worst case puts every request in
    flight ahead plus one running below, on a backend that more urgent classes leave at its
    floor of 5 %. False only means "ask the full decision".

    >>> admits_at_once(total=3, service_s=0.001, priority=Priority.BATCH, elapsed_s=0.0,
    ...                deadline_s=1.0, config=EdgeConfig())
    True
    """
    label = priority.label
    if total >= config.max_in_flight * config.in_flight_share[label]:
        return False
    worst = (total + 1) * service_s / _MIN_FREE
    ceiling = config.max_queue_delay_s[label]
    return ((ceiling is None or worst <= ceiling)
            and deadline_s >= elapsed_s + service_s + config.deadline_margin_s + worst)


STANDING_SHARE = 0.5  # a backlog whose fewest in flight reached half a share stands


def in_flight_cap(snapshot: EdgeSnapshot, label: str, config: EdgeConfig) -> float:
    """How many in flight (all classes) shed class ``label``: its share of ``max_in_flight``
    on a standing backlog, ``burst_factor`` times that on a burst.

    >>> cfg = EdgeConfig(max_in_flight=32)
    >>> in_flight_cap(EdgeSnapshot(standing=2), "interactive", cfg)  # was short: a burst
    48.0
    >>> in_flight_cap(EdgeSnapshot(standing=20), "interactive", cfg)  # has stood
    24.0
    """
    share = config.max_in_flight * config.in_flight_share[label]
    standing = snapshot.total if snapshot.standing is None else snapshot.standing
    return share if standing >= share * STANDING_SHARE else share * config.burst_factor


def fallback_affordable(*, loop_busy: float, max_loop_busy: float) -> bool:
    """Whether a shed request may still be answered by its fallback (the pipeline's cache hit or
    local steps) instead of 503 with Retry-After.

    A fallback answer costs the ingress about half of a model answer's CPU: decode, pipeline,
    recorders, encode. A 503 at the edge costs about a tenth. While the device is the
    bottleneck, the ingress has CPU to spare and every shed request gets its labelled answer.
    Once the ingress's event loop thread is saturated (``loop_busy``, its busy share of a
    core, see ``router.loop_load``), each fallback answer takes capacity from the requests let
    through. Under twice its capacity, a CPU-bound ingress then served under a tenth of its
    capacity in model answers. Past ``max_loop_busy``, shed requests get the 503.

    >>> fallback_affordable(loop_busy=0.5, max_loop_busy=0.8)
    True
    """
    return loop_busy <= max_loop_busy


def body_wait_s(*, received: int, elapsed_s: float, config: EdgeConfig) -> float:
    """How long the edge may still wait for more body bytes (<= 0: cut the client now).

    Bounded by the total timeout; after the grace period the bytes so far must keep up with
    ``body_min_rate_bps``, so the next bytes are due by ``received / min_rate``.

    >>> body_wait_s(received=0, elapsed_s=0.2, config=EdgeConfig(body_grace_s=1.0))
    0.8
    """
    due = max(config.body_grace_s, received / config.body_min_rate_bps)
    return round(min(config.body_timeout_s, due) - elapsed_s, 9)
