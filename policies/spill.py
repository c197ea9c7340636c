"""Overload spill: GPU pool, CPU pool, or the route's cheap model, with hysteresis.

A pure function over snapshots of the pools' ``RoutingStats`` (per replica: estimated queue delay
per priority class). The router keeps one ``SpillState`` per (route or model, priority) key and
passes the state returned with each decision to the next call; nothing here is mutable.

Estimate for this request on a pool: ``min over replicas(queue_delay_s[priority]) + compute_s``
(Ray's request router sends it to the replica with the shortest queue for its class). The
pressure is ``estimate / deadline_s``.

Hysteresis: spilling starts when pressure > ``high`` and stops only when pressure < ``low``
(``low < high``); in between the previous state holds, so routing does not flap around one
boundary. While spilling, the spill target is used only if it is better than the GPU pool (a
CPU pool whose own estimate is worse than the GPU's is not a relief).

Example::

    d = decide_spill(gpu=[stats], priority=Priority.INTERACTIVE, deadline_s=0.2,
                     compute_s=0.01, target="cpu", cpu=[cpu_stats], state=prev.state)
    d.where, d.reason  # 'cpu', 'gpu wait 0.310s = 1.55 x deadline 0.200s; entered spill ...'
    prev = d  # keep d.state for the next request with the same key
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

from policies.priority import Priority

__all__ = ["PoolStats", "SpillConfig", "SpillState", "SpillDecision", "decide_spill",
           "estimate_wait_s"]

SpillTarget = Literal["cpu", "cheap", "none"]
Where = Literal["gpu", "cpu", "cheap"]


class PoolStats(Protocol):
    """The part of ``pool._private.worker.RoutingStats`` the spill policy reads."""

    @property
    def queue_delay_s(self) -> tuple[float, float, float, float]: ...


@dataclass(frozen=True, slots=True)
class SpillConfig:
    """Hysteresis band, as multiples of the request's deadline (``low < high``)."""

    high: float = 1.0
    low: float = 0.7

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
    """Where to send the request, why, and the state to pass to the next decision."""

    where: Where
    reason: str
    gpu_wait_s: float
    alt_wait_s: float | None
    pressure: float
    state: SpillState

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

    ``cpu`` is the CPU pool's snapshot (None = no CPU estimate: trust the CPU pool);
    ``cpu_compute_s`` the request's compute there (defaults to ``compute_s``). A request without
    a deadline never spills.
    """
    if compute_s < 0 or cheap_compute_s < 0:
        raise ValueError(f"compute_s and cheap_compute_s must be >= 0, got {compute_s!r}, "
                         f"{cheap_compute_s!r}")
    gpu_wait = estimate_wait_s(gpu, priority, compute_s)
    if deadline_s is None or target == "none":
        why = "no deadline" if deadline_s is None else "route does not spill"
        return SpillDecision("gpu", why, gpu_wait, None, 0.0, SpillState())
    if deadline_s <= 0:
        raise ValueError(f"deadline_s must be > 0, got {deadline_s!r}")
    pressure = gpu_wait / deadline_s
    if state.spilling:
        spilling = pressure >= config.low
    else:
        spilling = pressure > config.high
    new_state = (SpillState(True, state.since if state.spilling else now) if spilling
                 else SpillState())
    band = f"gpu wait {gpu_wait:.3f}s = {pressure:.2f} x deadline {deadline_s:.3f}s"
    if not spilling:
        why = "below spill band" if not state.spilling else f"left spill (< {config.low:.2f})"
        return SpillDecision("gpu", f"{band}; {why}", gpu_wait, None, pressure, new_state)
    entered = "entered" if not state.spilling else "holding"
    if target == "cheap":
        return SpillDecision("cheap", f"{band}; {entered} spill to cheap model", gpu_wait,
                             cheap_compute_s, pressure, new_state)
    alt = (estimate_wait_s(cpu, priority, compute_s if cpu_compute_s is None else cpu_compute_s)
           if cpu is not None else None)
    if alt is not None and alt >= gpu_wait:
        return SpillDecision("gpu", f"{band}; {entered} spill but cpu wait {alt:.3f}s is no "
                             "better", gpu_wait, alt, pressure, new_state)
    return SpillDecision("cpu", f"{band}; {entered} spill to cpu pool", gpu_wait, alt, pressure,
                         new_state)
