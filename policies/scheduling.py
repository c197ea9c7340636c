"""Scheduling: which model runs next on a device, how many rows, and in what chunk.

Pure decision over an immutable snapshot of the device's queues; the worker executes the decision
(makes the model resident, runs ``chunk_rows`` rows) and asks again. Because it asks again after
every chunk, a more urgent arrival waits at most one chunk of less urgent work (preemption).

Policies (one registry, :func:`get_scheduling_policy`):

- ``priority`` (default): priority classes with aging, earliest deadline first within a class,
  dynamic batching per model, chunked execution of non-realtime batches, time slices that keep a
  resident model serving its queue for up to ``slice_s`` instead of swapping on every request.
- ``fifo``: first come first served across all models, whole batches, no priorities; the baseline
  the benchmarks compare against.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from policies.priority import Priority

__all__ = [
    "RequestView",
    "ModelView",
    "SchedulerSnapshot",
    "ScheduleDecision",
    "SchedulingPolicy",
    "PrioritySchedulingPolicy",
    "FifoSchedulingPolicy",
    "SCHEDULING_POLICIES",
    "get_scheduling_policy",
]

_INF = float("inf")


@dataclass(frozen=True, slots=True)
class RequestView:
    """One queued request: ``rows`` still to run (``started`` once a chunk of it ran)."""

    id: int
    priority: Priority
    deadline: float | None
    arrival: float
    rows: int
    started: bool = False


@dataclass(frozen=True, slots=True)
class ModelView:
    """One model's queue on the device and what it costs to run it."""

    key: str
    resident: bool
    requests: tuple[RequestView, ...]
    max_batch_size: int
    batch_wait_s: float = 0.0
    row_cost_s: float = 0.0  # measured compute time per row (EWMA)
    swap_cost_s: float = 0.0  # estimated time to make it resident


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """The device's queues at ``now``; ``current`` is the model whose slice began at
    ``slice_start``."""

    now: float
    models: tuple[ModelView, ...]
    current: str | None = None
    slice_start: float = 0.0
    slice_s: float = 0.05
    chunk_size: int = 16


@dataclass(frozen=True, slots=True)
class ScheduleDecision:
    """What the worker does next.

    ``expired``: request ids to answer with RequestExpired now (not run). When ``model`` is set:
    take ``rows`` rows from ``request_ids`` (in order) as the batch and run its first
    ``chunk_rows`` rows, then ask again. ``model`` None: idle until an arrival or ``wait_until``.
    ``priority`` is the class the chunk runs under (CUDA stream priority, eviction rights).
    """

    model: str | None = None
    request_ids: tuple[int, ...] = ()
    rows: int = 0
    chunk_rows: int = 0
    priority: Priority = Priority.INTERACTIVE
    expired: tuple[int, ...] = ()
    wait_until: float | None = None
    reason: str = ""


class SchedulingPolicy(ABC):
    """One decision method over a snapshot; expiry and batch formation live here once."""

    name: str = "abstract"

    @abstractmethod
    def rank(self, req: RequestView, now: float) -> tuple:
        """Smaller = served first."""

    @abstractmethod
    def choose_model(
        self, snap: SchedulerSnapshot, live: dict[str, list[RequestView]], best: str
    ) -> tuple[str, str]:
        """The model to serve (given the model of the best-ranked request) and why."""

    @abstractmethod
    def chunk_rows(self, snap: SchedulerSnapshot, model: ModelView, rows: int, cls: Priority) -> int:
        """How many of the batch's ``rows`` run before the next decision."""

    def effective_class(self, req: RequestView, now: float) -> Priority:
        return req.priority

    def decide(self, snap: SchedulerSnapshot) -> ScheduleDecision:
        expired: list[int] = []
        live: dict[str, list[RequestView]] = {}
        by_key = {m.key: m for m in snap.models}
        for m in snap.models:
            keep = []
            for r in m.requests:
                # Not run when it cannot finish in time: its fallback is better served now.
                if r.deadline is not None and snap.now + r.rows * m.row_cost_s >= r.deadline:
                    expired.append(r.id)
                else:
                    keep.append(r)
            if keep:
                keep.sort(key=lambda r: self.rank(r, snap.now))
                live[m.key] = keep
        if not live:
            return ScheduleDecision(expired=tuple(expired), reason="idle")
        best = min(live, key=lambda k: self.rank(live[k][0], snap.now))
        key, reason = self.choose_model(snap, live, best)
        model, reqs = by_key[key], live[key]
        cls = self.effective_class(reqs[0], snap.now)
        ids, rows = [], 0
        for r in reqs:
            if rows >= model.max_batch_size:
                break
            ids.append(r.id)
            rows += r.rows
        rows = min(rows, model.max_batch_size)
        oldest = min(r.arrival for r in reqs)
        ready_at = oldest + model.batch_wait_s
        if rows < model.max_batch_size and snap.now < ready_at and not any(r.started for r in reqs):
            return ScheduleDecision(expired=tuple(expired), wait_until=ready_at, reason="batching")
        return ScheduleDecision(
            model=key,
            request_ids=tuple(ids),
            rows=rows,
            chunk_rows=self.chunk_rows(snap, model, rows, cls),
            priority=cls,
            expired=tuple(expired),
            reason=reason,
        )


class PrioritySchedulingPolicy(SchedulingPolicy):
    """Priority classes with aging, EDF within a class, chunking and time slices.

    Aging: a request is promoted one class per ``aging_s`` waited, so nothing starves. A request
    without a deadline is ranked within its class as if its deadline were
    ``arrival + soft_deadline_s``, so aged work eventually beats fresh work of the same class.
    """

    name = "priority"

    def __init__(self, *, aging_s: float = 2.0, soft_deadline_s: float = 8.0) -> None:
        if aging_s <= 0 or soft_deadline_s <= 0:
            raise ValueError(
                f"aging_s and soft_deadline_s must be > 0, got {aging_s}, {soft_deadline_s}"
            )
        self.aging_s = aging_s
        self.soft_deadline_s = soft_deadline_s

    def effective_class(self, req: RequestView, now: float) -> Priority:
        steps = int(max(0.0, now - req.arrival) // self.aging_s)
        return Priority(max(0, int(req.priority) - steps))

    def rank(self, req: RequestView, now: float) -> tuple:
        deadline = req.deadline if req.deadline is not None else req.arrival + self.soft_deadline_s
        return (self.effective_class(req, now), deadline, req.arrival, req.id)

    def choose_model(self, snap, live, best):
        cur = snap.current
        if cur is None or cur == best or cur not in live:
            return best, "best"
        cur_view = next(m for m in snap.models if m.key == cur)
        best_view = next(m for m in snap.models if m.key == best)
        if not cur_view.resident or best_view.resident:
            return best, "best"  # switching costs no swap: no reason to stick
        in_slice = snap.now - snap.slice_start < snap.slice_s
        same_class = self.effective_class(live[cur][0], snap.now) <= self.effective_class(
            live[best][0], snap.now
        )
        if in_slice and same_class:
            return cur, "slice"
        return best, "best"

    def chunk_rows(self, snap, model, rows, cls):
        if cls == Priority.REALTIME:
            return rows  # nothing outranks it: no preemption point needed
        return max(1, min(rows, snap.chunk_size))


class FifoSchedulingPolicy(SchedulingPolicy):
    """First come first served over all models, whole batches, no classes: the baseline."""

    name = "fifo"

    def rank(self, req: RequestView, now: float) -> tuple:
        return (req.arrival, req.id)

    def choose_model(self, snap, live, best):
        return best, "oldest"

    def chunk_rows(self, snap, model, rows, cls):
        return rows


SCHEDULING_POLICIES: dict[str, type[SchedulingPolicy]] = {
    PrioritySchedulingPolicy.name: PrioritySchedulingPolicy,
    FifoSchedulingPolicy.name: FifoSchedulingPolicy,
}


def get_scheduling_policy(name: str, **kwargs) -> SchedulingPolicy:
    """Build the scheduling policy registered under ``name``; unknown names list the valid ones."""
    try:
        cls = SCHEDULING_POLICIES[name]
    except KeyError:
        raise ValueError(
            f"scheduling policy must be one of {', '.join(sorted(SCHEDULING_POLICIES))}, "
            f"got {name!r}"
        ) from None
    return cls(**kwargs)
