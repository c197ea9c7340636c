"""Replica ranking for Ray Serve's request router: where should this request go?

Pure: over the routing stats each pool replica publishes. Rule: replicas where the model is
already resident on the device first, then replicas holding it in their host tier (a cheap
swap-in), then the rest; within each tier, shortest estimated wait for the request's priority
first. Replicas whose stats are missing (just started) rank with the "rest" at an unknown wait,
after the ones that reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.priority import Priority

__all__ = ["ReplicaView", "RouteTarget", "rank_replicas", "model_matches"]


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What one replica reported (``queue_delay_s`` indexed by Priority value)."""

    id: str
    resident: frozenset[str] = frozenset()
    hosted: frozenset[str] = frozenset()
    queue_delay_s: tuple[float, ...] | None = None  # None: no stats yet
    memory_free_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """The request being routed: ``model`` (None: unknown), optional ``version``, class."""

    model: str | None
    version: str | None = None
    priority: Priority = Priority.INTERACTIVE


def model_matches(keys: frozenset[str], target: RouteTarget) -> bool:
    """Is ``target`` among ``keys`` ("name@version"); any version when none is requested."""
    if target.model is None:
        return False
    if target.version is not None:
        return f"{target.model}@{target.version}" in keys
    prefix = f"{target.model}@"
    return any(k == target.model or k.startswith(prefix) for k in keys)


def rank_replicas(
    replicas: list[ReplicaView] | tuple[ReplicaView, ...], target: RouteTarget
) -> list[list[str]]:
    """Replica ids in ranks, most preferred first (each rank is tried before the next).

    Replicas in a tier with the same estimated wait share a rank, so Ray's router can pick among
    them by queue length.
    """

    def tier(r: ReplicaView) -> int:
        if r.queue_delay_s is None:
            return 3
        if model_matches(r.resident, target):
            return 0
        if model_matches(r.hosted, target):
            return 1
        return 2

    def wait(r: ReplicaView) -> float:
        if r.queue_delay_s is None:
            return float("inf")
        i = min(int(target.priority), len(r.queue_delay_s) - 1)
        return float(r.queue_delay_s[i])

    ordered = sorted(replicas, key=lambda r: (tier(r), wait(r), r.id))
    ranks: list[list[str]] = []
    last: tuple[int, float] | None = None
    for r in ordered:
        k = (tier(r), round(wait(r), 4) if wait(r) != float("inf") else float("inf"))
        if k != last:
            ranks.append([])
            last = k
        ranks[-1].append(r.id)
    return ranks
