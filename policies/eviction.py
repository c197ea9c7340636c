"""Eviction: which resident models leave the device so another one fits.

Pure decision over an immutable snapshot (no I/O, no torch). The memory manager builds the
snapshot, asks a policy for victims, and performs the swap-outs itself.

Rules every policy obeys (enforced once, in :class:`EvictionPolicy.choose`):

- a model that is running or pinned is never a victim;
- a model with queued work more urgent than the requester's class is never a victim (a realtime
  model may evict lower-priority models even when they have queued work, not the reverse);
- idle models (no queued work) go before models with queued work;
- victims are taken in the policy's order until enough bytes are free; if even every eligible
  victim would not free enough, the decision says so (``feasible=False``) and evicts nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from policies.priority import Priority

__all__ = [
    "EVICTION_POLICIES",
    "EvictionDecision",
    "EvictionPolicy",
    "EvictionRequest",
    "LruEviction",
    "PriorityLruEviction",
    "ResidentView",
    "get_eviction_policy",
]


@dataclass(frozen=True, slots=True)
class ResidentView:
    """One model resident on the device, as the eviction policy sees it.

    ``queued_priority`` is the most urgent class among its queued requests (None: no queued work);
    ``priority`` is its configured class; ``reload_cost_s`` estimates the time to bring it back
    (a host->device copy when the host tier holds it, a disk load otherwise).
    """

    key: str
    nbytes: int
    priority: Priority
    last_used: float
    reload_cost_s: float
    queued_priority: Priority | None = None
    running: bool = False
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class EvictionRequest:
    """``need_bytes`` more bytes are wanted for a model of class ``priority``."""

    need_bytes: int
    free_bytes: int
    priority: Priority
    now: float
    resident: tuple[ResidentView, ...]


@dataclass(frozen=True, slots=True)
class EvictionDecision:
    """Victims in eviction order; ``feasible`` is False when no choice frees enough bytes."""

    victims: tuple[str, ...]
    feasible: bool
    freed_bytes: int


class EvictionPolicy(ABC):
    """One decision: the order in which eligible residents should leave."""

    name: str = "abstract"

    @abstractmethod
    def sort_key(self, view: ResidentView, request: EvictionRequest) -> tuple:
        """Smaller key = evicted earlier. Only called for eligible residents."""

    def eligible(self, view: ResidentView, request: EvictionRequest) -> bool:
        if view.running or view.pinned:
            return False
        return view.queued_priority is None or view.queued_priority >= request.priority

    def choose(self, request: EvictionRequest) -> EvictionDecision:
        """Victims freeing at least ``need_bytes - free_bytes``; the rule shared by all policies."""
        short = request.need_bytes - request.free_bytes
        if short <= 0:
            return EvictionDecision((), True, 0)
        candidates = [v for v in request.resident if self.eligible(v, request)]
        # Idle models first, whatever the policy says: evicting queued work costs a swap back.
        candidates.sort(key=lambda v: (v.queued_priority is not None, self.sort_key(v, request)))
        victims: list[str] = []
        freed = 0
        for v in candidates:
            if freed >= short:
                break
            victims.append(v.key)
            freed += v.nbytes
        if freed < short:
            return EvictionDecision((), False, 0)
        return EvictionDecision(tuple(victims), True, freed)


class PriorityLruEviction(EvictionPolicy):
    """Least valuable first: lowest class, then least recently used, then cheapest to reload.

    The class considered is the more urgent of the configured class and the queued work's class.
    Recency is bucketed (``recency_bucket_s``) so that reload cost breaks ties between models used
    at about the same time.
    """

    name = "priority_lru"

    def __init__(self, recency_bucket_s: float = 0.05) -> None:
        if recency_bucket_s <= 0:
            raise ValueError(f"recency_bucket_s must be > 0, got {recency_bucket_s}")
        self.recency_bucket_s = recency_bucket_s

    def sort_key(self, view: ResidentView, request: EvictionRequest) -> tuple:
        cls = (view.priority if view.queued_priority is None
               else min(view.priority, view.queued_priority))
        return (-int(cls), int(view.last_used // self.recency_bucket_s), view.reload_cost_s,
                view.key)


class LruEviction(EvictionPolicy):
    """Plain least-recently-used (what stock multiplexing does); the baseline."""

    name = "lru"

    def sort_key(self, view: ResidentView, request: EvictionRequest) -> tuple:
        return (view.last_used, view.key)


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {
    PriorityLruEviction.name: PriorityLruEviction,
    LruEviction.name: LruEviction,
}


def get_eviction_policy(name: str) -> EvictionPolicy:
    """Build the eviction policy registered under ``name``; unknown names list the valid ones."""
    try:
        return EVICTION_POLICIES[name]()
    except KeyError:
        raise ValueError(
            f"eviction policy must be one of {', '.join(sorted(EVICTION_POLICIES))}, got {name!r}"
        ) from None
