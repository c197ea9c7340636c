"""Replica ranking for Ray Serve's request router: where should this request go?

Pure: over the routing stats each pool replica publishes. Rule: replicas where the model is
already resident on the device first, then replicas holding it in their host tier (a cheap
swap-in), then the rest; within each tier, shortest estimated wait for the request's priority
first. Replicas whose stats are missing (just started) rank with the "rest" at an unknown wait,
after the ones that reported.

With a placement plan (``policies.placement``), the model's target set comes before every other
replica: its members that reported share the first rank, whatever their residency (a hot model
must reach the target replicas where it is not resident yet, or it never spreads), unless one's
wait for the request's priority exceeds the best member's by more than ``TARGET_WAIT_SLACK_S``.
Ray picks within a rank by its live queue length, fresher than the published waits (a stats
period old), which would send a hot model's whole load to one replica per period.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.priority import Priority

__all__ = ["TARGET_WAIT_SLACK_S", "ReplicaView", "RouteTarget", "rank_replicas", "model_matches"]

# Target replicas whose waits differ by less than this share a rank: below it the published wait
# is noise next to one batch of the encoders we serve (a few ms to tens of ms).
TARGET_WAIT_SLACK_S = 0.05


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
    replicas: list[ReplicaView] | tuple[ReplicaView, ...], target: RouteTarget,
    placed_on: frozenset[str] | None = None,
) -> list[list[str]]:
    """Replica ids in ranks, most preferred first (each rank is tried before the next).

    Replicas in a tier with the same estimated wait share a rank, so Ray's router can pick among
    them by queue length. ``placed_on``: the model's target replica set (ids), ranked first.
    """
    if placed_on:
        inside = [r for r in replicas if r.id in placed_on and r.queue_delay_s is not None]
        if inside:
            rest = [r for r in replicas if r not in inside]
            return _target_ranks(inside, target.priority) + rank_replicas(rest, target)

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


def _wait(r: ReplicaView, priority: int) -> float:
    if r.queue_delay_s is None:
        return float("inf")
    return float(r.queue_delay_s[min(int(priority), len(r.queue_delay_s) - 1)])


def _target_ranks(inside: list[ReplicaView], priority: int) -> list[list[str]]:
    """The target set: one rank within the wait slack of its best member, then the others."""
    best = min(_wait(r, priority) for r in inside)
    near = sorted(r.id for r in inside if _wait(r, priority) <= best + TARGET_WAIT_SLACK_S)
    far = sorted((r for r in inside if r.id not in near), key=lambda r: (_wait(r, priority), r.id))
    return [near] + [[r.id] for r in far]
