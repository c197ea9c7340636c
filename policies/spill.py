"""Overload spill: GPU pool, CPU pool, or the route's cheap model, with hysteresis.

A pure function over snapshots of the pools' ``RoutingStats`` (per replica: estimated queue delay
per priority class). The router keeps one ``SpillState`` per (route or model, priority) key and
passes the state returned with each decision to the next call; nothing here is mutable.

Estimate for this request on a pool: ``min over replicas(queue_delay_s[priority]) + compute_s``
(Ray's request router sends it to the replica with the shortest queue for its class). The
pressure is ``estimate / deadline_s``.

Hysteresis: spilling starts when pressure > ``high`` and stops only when pressure < ``low``
(``low < high``); in between the previous state holds, so routing does not flap around one
boundary. ``high`` below 1 leaves headroom for what the estimate cannot see (the batch in
flight, estimate lag).

While spilling, the request goes to the route's target: ``cpu`` (the CPU pool, even when its own
estimate misses the deadline too: the GPU pool is kept within its deadlines instead of
collapsing with it; ``alt_meets_deadline`` tells the router so it may take a fallback),
``cheap`` (the route's cheap model), or ``cpu-then-cheap`` (the CPU pool while its estimate is
within ``high`` x deadline, else the cheap model).

Example::

    d = decide_spill(gpu=[stats], priority=Priority.INTERACTIVE, deadline_s=0.2,
                     compute_s=0.01, target="cpu", cpu=[cpu_stats], state=prev.state)
    d.where, d.code, d.reason  # 'cpu', 'entered', 'gpu wait 0.310s = 1.55 x deadline ...'
    prev = d  # keep d.state for the next request with the same key
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from policies.priority import Priority

__all__ = [
    "SPILL_TARGETS",
    "PoolStats",
    "SpillConfig",
    "SpillDecision",
    "SpillState",
    "decide_spill",
    "estimate_wait_s",
]

SpillTarget = Literal["cpu", "cheap", "cpu-then-cheap", "none"]
SPILL_TARGETS: tuple[str, ...] = ("cpu", "cheap", "cpu-then-cheap", "none")
Where = Literal["gpu", "cpu", "cheap"]
# Decision codes, stable for metrics: why the request went where it did.
Code = Literal["no-deadline", "no-spill", "below", "left", "entered", "holding"]


class PoolStats(Protocol):
    """The part of ``pool._private.worker.RoutingStats`` the spill policy reads."""

    @property
    def queue_delay_s(self) -> tuple[float, float, float, float]: ...


@dataclass(frozen=True, slots=True)
class SpillConfig:
    """Hysteresis band, as multiples of the request's deadline (``0 < low < high``)."""

    high: float = 0.8
    low: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 < self.low < self.high:
            raise ValueError(f"SpillConfig needs 0 < low < high, got low={self.low!r} "
                             f"high={self.high!r}")


@dataclass(frozen=True, slots=True)
class SpillState:
    """Carried between decisions for one key. ``since`` = clock value when spilling began."""

    spilling: bool = False
    since: float | None = None


@dataclass(frozen=True, slots=True)
class SpillDecision:
    """Where to send the request, why, and the state to pass to the next decision.

    ``alt_wait_s`` is the estimate on the spill target (None when unknown);
    ``alt_meets_deadline`` is False when the target is expected to miss the deadline too.
    """

    where: Where
    code: Code
    reason: str
    gpu_wait_s: float
    alt_wait_s: float | None
    pressure: float
    state: SpillState
    alt_meets_deadline: bool = True

    @property
    def spilled(self) -> bool:
        return self.where != "gpu"


def estimate_wait_s(stats: Sequence[PoolStats], priority: Priority, compute_s: float) -> float:
    """Best replica's queue delay for ``priority`` plus this request's compute (inf if none)."""
    if not stats:
        return float("inf")
    return min(s.queue_delay_s[int(priority)] for s in stats) + compute_s


def decide_spill(
    *,
    gpu: Sequence[PoolStats],
    priority: Priority,
    deadline_s: float | None,
    compute_s: float,
    target: SpillTarget,
    state: SpillState = SpillState(),
    config: SpillConfig = SpillConfig(),
    cpu: Sequence[PoolStats] | None = None,
    cpu_compute_s: float | None = None,
    cheap_compute_s: float = 0.0,
    now: float = 0.0,
) -> SpillDecision:
    """Decide gpu / cpu / cheap for one request (see the module docstring for the rule).

    ``deadline_s`` is the request's remaining budget (None: never spills). ``cpu`` is the CPU
    pool's snapshot (None = no estimate: trust it); ``cpu_compute_s`` the request's compute there
    (defaults to ``compute_s``); ``cheap_compute_s`` the cheap model's, reported only.
    """
    if target not in SPILL_TARGETS:
        raise ValueError(f"target must be one of {', '.join(SPILL_TARGETS)}, got {target!r}")
    if compute_s < 0 or cheap_compute_s < 0:
        raise ValueError(f"compute_s and cheap_compute_s must be >= 0, got {compute_s!r}, "
                         f"{cheap_compute_s!r}")
    gpu_wait = estimate_wait_s(gpu, priority, compute_s)
    if deadline_s is None:
        return SpillDecision("gpu", "no-deadline", "no deadline", gpu_wait, None, 0.0,
                             SpillState())
    # A spent budget (e.g. a cascade whose cheap answer came late from the cache) is infinite
    # pressure: the request cannot wait for the GPU, so it spills if the route spills at all.
    pressure = gpu_wait / deadline_s if deadline_s > 0 else float("inf")
    if target == "none":
        return SpillDecision("gpu", "no-spill", "route does not spill", gpu_wait, None, pressure,
                             SpillState())
    spilling = pressure >= config.low if state.spilling else pressure > config.high
    band = f"gpu wait {gpu_wait:.3f}s = {pressure:.2f} x deadline {deadline_s:.3f}s"
    if not spilling:
        code: Code = "left" if state.spilling else "below"
        why = f"left spill (< {config.low:.2f})" if state.spilling else "below spill band"
        return SpillDecision("gpu", code, f"{band}; {why}", gpu_wait, None, pressure,
                             SpillState())
    new_state = SpillState(True, state.since if state.spilling else now)
    code = "holding" if state.spilling else "entered"
    alt = None
    if target in ("cpu", "cpu-then-cheap") and cpu is not None:
        alt = estimate_wait_s(cpu, priority, compute_s if cpu_compute_s is None else cpu_compute_s)
    cpu_ok = alt is None or alt <= deadline_s * config.high
    if target == "cheap" or (target == "cpu-then-cheap" and not cpu_ok):
        extra = "" if target == "cheap" else f" (cpu wait {alt:.3f}s would miss)"
        return SpillDecision("cheap", code, f"{band}; {code} spill to cheap model{extra}",
                             gpu_wait, cheap_compute_s, pressure, new_state)
    extra = "" if cpu_ok else f" (cpu wait {alt:.3f}s would miss too)"
    return SpillDecision("cpu", code, f"{band}; {code} spill to cpu pool{extra}", gpu_wait, alt,
                         pressure, new_state, alt_meets_deadline=cpu_ok)
