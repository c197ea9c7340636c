"""Scheduling: which model runs next on a device, how many rows, and in what chunk.

Pure decision over an immutable snapshot of the device's queues; the worker executes the decision
(makes the model resident, runs ``chunk_rows`` rows) and asks again. Because it asks again after
every chunk, a more urgent arrival waits at most one chunk of less urgent work (preemption).

Policies (one registry, :func:`get_scheduling_policy`):

- ``priority`` (default): priority classes with aging, earliest deadline first within a class,
  dynamic batching per model, chunked execution of non-realtime batches (a chunk is sized in
  milliseconds of estimated work, from the model's measured cost per row, and capped at the
  device's ``chunk_size`` rows), time slices that keep a resident model serving its queue for up
  to ``slice_s`` instead of swapping on every request.
- ``fifo``: first come first served across all models, whole batches, no priorities; the baseline
  the benchmarks compare against.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from policies.device_queue import ModelView, RequestView, SchedulerSnapshot
from policies.estimates import request_work_s
from policies.priority import Priority

__all__ = [
    "DEFAULT_CHUNK_MS",
    "SCHEDULING_POLICIES",
    "FifoSchedulingPolicy",
    "PrioritySchedulingPolicy",
    "ScheduleDecision",
    "SchedulingPolicy",
    "Triage",
    "device_scheduling_policy",
    "get_scheduling_policy",
    "misses_alone",
]

_INF = float("inf")
# A batch or background request late in its budget is ranked one class up (never realtime).
_ONE_UP = {Priority.BATCH: Priority.INTERACTIVE, Priority.BACKGROUND: Priority.BATCH}

# Work per chunk, by the class of the request at the head of the batch. It is the preemption
# bound: a more urgent arrival waits for at most one chunk. Realtime work is not chunked (nothing
# outranks it). A chunk much shorter than a few hundred microseconds of work costs more in
# per-chunk overhead (decision, copy, thread hop) than it gains, so 2 ms is the default.
DEFAULT_CHUNK_MS: Mapping[Priority, float | None] = {
    Priority.REALTIME: None,
    Priority.INTERACTIVE: 2.0,
    Priority.BATCH: 2.0,
    Priority.BACKGROUND: 2.0,
}


# Not frozen: one is built per decision on the request path, and a frozen dataclass's
# constructor costs 2.5x (0.84 against 0.34 us); nothing changes a decision once made.
@dataclass(slots=True)
class ScheduleDecision:
    """What the worker does next.

    ``expired``: request ids to answer with RequestExpired now (not run); ``too_short``: those
    of them whose deadline is shorter than their own work (:func:`misses_alone`: they would miss
    on an idle device too), answered with DeadlineTooShort. When ``model`` is set:
    take ``rows`` rows from ``request_ids`` (in order) as the batch and run its first
    ``chunk_rows`` rows, then ask again. ``model`` None: idle until an arrival or ``wait_until``.
    ``priority`` is the class the chunk runs under (CUDA stream priority, eviction rights).
    ``work_s`` is the chunk's estimated compute, which the worker compares with the wall time
    the chunk took (``policies.estimates.Pace``); 0 when that estimate is a guess (a model not
    measured lately, or one swapped in within the chunk), which would teach the pace nothing.
    """

    model: str | None = None
    request_ids: tuple[int, ...] = ()
    rows: int = 0
    chunk_rows: int = 0
    priority: Priority = Priority.INTERACTIVE
    expired: tuple[int, ...] = ()
    wait_until: float | None = None
    reason: str = ""
    work_s: float = 0.0
    # What the triage behind this decision kept (set on a plan's first decision): the
    # estimated work of every live request (this batch's included, pace not applied) and the
    # rank of the last one, which an arrival is admitted against (``admit_arrival``).
    # (Bookkeeping, not part of what is decided: left out of comparisons.) ``tail``: the rank
    # of the last live request that the plan's batches leave queued; ``tail_all``: of the
    # last live request before any of them launched.
    live_s: float = field(default=0.0, compare=False)
    tail: tuple | None = field(default=None, compare=False)
    tail_all: tuple | None = field(default=None, compare=False)
    # This chunk's estimated device time as the triage counted it (its swap-in included): what
    # leaves the live work when it launches.
    cost_s: float = field(default=0.0, compare=False)
    too_short: tuple[int, ...] = ()


@dataclass(slots=True)
class Triage:
    """:meth:`SchedulingPolicy.triage` with what it adds up on the way: the live requests'
    estimated work (``live_s``, pace not applied) and the rank of the last one (``tail``)."""

    expired: list[int]
    live: dict[str, list[RequestView]]
    live_s: float
    tail: tuple | None
    ranked: list[tuple[tuple, RequestView]]  # the live requests with their ranks, in order
    too_short: list[int] = field(default_factory=list)  # of ``expired``: see ScheduleDecision


def misses_alone(arrival: float, deadline: float | None, own_s: float, pace: float) -> bool:
    """Whether a request whose own estimated work (its rows, its model's swap-in if not
    resident) is ``own_s`` would have missed ``deadline`` with the device to itself from its
    ``arrival``: its deadline, not the load, refuses it (``DeadlineTooShort``, a 504 for the
    caller rather than a 503). The test every refusal of the triage and the arrival check
    makes, with nothing ahead and no time spent queued."""
    return deadline is not None and arrival + own_s * pace >= deadline


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

    # ``choose_model``'s reason when only one model has work (the lone-request decisions)
    alone_reason: str = "best"
    # May work of a more urgent class take the place of a batch launched and not yet started
    # (a device that keeps the next batch at hand)? Only where classes order the work.
    displaces_waiting: bool = False

    @abstractmethod
    def chunk_rows(self, rows: int, cls: Priority, *, row_cost_s: float, chunk_size: int) -> int:
        """How many of the batch's ``rows`` run before the next decision; ``cls`` is the own
        (not aged) class of the request at the head of the batch, ``row_cost_s`` the model's
        cost per row (0: unknown) and ``chunk_size`` the device's rows per chunk."""

    def effective_class(self, req: RequestView, now: float) -> Priority:
        return req.priority

    def triage(self, snap: SchedulerSnapshot) -> tuple[list[int], dict[str, list[RequestView]]]:
        """Split the queues into requests to expire now and live ones (per model, rank order).

        Requests are walked in rank order while the estimated work ahead adds up (rows times
        cost per row, plus one swap-in per model not resident). Requests of a model whose
        weights are loading from disk (``ModelView.loading``) are neither run nor counted
        ahead of others; one that cannot finish behind the rest of the load (its
        ``swap_cost_s``, the load's estimated time left) expires now, the others at their
        deadline if the load has not finished by then.
        A request that would finish after its deadline behind the work ranked before it is not
        run: its fallback is better served now, and under overload the time goes to requests
        that can still make it instead of to ones that would answer late anyway. Costs are
        measured compute times the device's observed pace (``snap.pace``): a device running
        behind its estimates refuses as soon as a request is queued where it would miss,
        instead of when its deadline has passed.
        """
        t = self.triaged(snap)
        return t.expired, t.live

    def triaged(self, snap: SchedulerSnapshot) -> Triage:
        """:meth:`triage`, with the live work and the last live rank it added up."""
        order = sorted(
            ((self.rank(r, snap.now), r, m) for m in snap.models for r in m.requests
             if not m.loading),
            key=lambda t: t[0],
        )
        expired = [r.id for m in snap.models if m.loading for r in m.requests
                   if _misses_load(m, r, snap)]
        too_short: list[int] = []
        live: dict[str, list[RequestView]] = {}
        ranked: list[tuple[tuple, RequestView]] = []
        ahead = 0.0
        for rank, r, m in order:
            work = request_work_s(m, r, swap_paid=m.key in live)
            if r.deadline is not None and snap.now + (ahead + work) * snap.pace >= r.deadline:
                expired.append(r.id)
                if misses_alone(r.arrival, r.deadline, request_work_s(m, r, swap_paid=False),
                                snap.pace):
                    too_short.append(r.id)
                continue
            ahead += work
            ranked.append((rank, r))
            live.setdefault(m.key, []).append(r)
        return Triage(expired, live, ahead, ranked[-1][0] if ranked else None, ranked,
                      too_short)

    def admit_arrival(self, *, now: float, deadline: float | None, rank: tuple, work_s: float,
                      swap_s: float, swap_paid: bool, live_s: float, tail: tuple | None,
                      pace: float) -> bool | None:
        """An arrival at a full device, judged in constant time against the last triage: the
        estimated work it kept live (``live_s``, less what launched since, plus the arrivals
        kept since) and the rank of its last live request (``tail``). ``work_s`` is the
        arrival's own work, ``swap_s`` its model's swap-in (0 if resident), which it pays
        unless a live request of its model is ranked before it (``swap_paid``: one is live).

        True: it meets its deadline behind all of that work, whatever its rank: :meth:`triage`
        would keep it. False: it ranks after every live request (``rank >= tail``) and misses
        behind them: the triage would refuse it, so refuse it now. None: it would rank among
        them (an earlier deadline than work already queued): only a triage can tell.

        Before, each arrival at a full device that did not fit behind all queued work ran a
        full triage, whose cost grows with the queue, which is longest past saturation: on an
        H100 at 1.7x a 300-model zoo's capacity the worker spent its time triaging arrivals and
        answered 4 % of them in time (``docs/PERFORMANCE.md``, "Past capacity, the triage took
        the loop")."""
        if deadline is None or now + (live_s + work_s + swap_s) * pace < deadline:
            return True
        if tail is None or rank >= tail:
            own = work_s if swap_paid else work_s + swap_s
            return now + (live_s + own) * pace < deadline
        return None

    def decide(self, snap: SchedulerSnapshot) -> ScheduleDecision:
        """What the worker does next (see :class:`ScheduleDecision`)."""
        if len(snap.models) == 1 and len(snap.models[0].requests) == 1:
            return self._decide_lone(snap, snap.models[0], snap.models[0].requests[0])
        return self._decide(snap)

    def _decide_lone(self, snap: SchedulerSnapshot, model: ModelView,
                     r: RequestView) -> ScheduleDecision:
        """:meth:`_decide` for one queued request of one model (a lone arrival on an idle
        device, the common case at low load), without building the rank order: the same rules,
        read off directly (``tests/unit/pool/test_scheduling_policy.py`` checks they agree)."""
        if model.loading:
            return self._decide(snap)
        own = request_work_s(model, r, swap_paid=False)
        if r.deadline is not None and snap.now + own * snap.pace >= r.deadline:
            return ScheduleDecision(expired=(r.id,), reason="idle", too_short=(
                (r.id,) if misses_alone(r.arrival, r.deadline, own, snap.pace) else ()))
        rows = min(r.rows, model.max_batch_size)
        ready_at = r.arrival + model.batch_wait_s
        if (rows < model.max_batch_size and snap.now < ready_at
                and model.arrival_gap_s < model.batch_wait_s and not r.started):
            return ScheduleDecision(wait_until=ready_at, reason="batching")
        chunk = self.chunk_rows(rows, r.priority, row_cost_s=model.row_cost_s,
                                chunk_size=snap.chunk_size)
        return ScheduleDecision(
            model=model.key, request_ids=(r.id,), rows=rows, chunk_rows=chunk,
            priority=self.effective_class(r, snap.now), reason=self.alone_reason,
            work_s=chunk * model.row_cost_s if model.resident and model.measured else 0.0,
        )

    def decide_arrival(self, *, now: float, model: str, request_id: int, priority: Priority,
                       deadline: float | None, rows: int, max_batch_size: int,
                       row_cost_s: float, measured: bool, chunk_size: int, pace: float,
                       batch_wait_s: float = 0.0, arrival_gap_s: float = math.inf
                       ) -> ScheduleDecision:
        """:meth:`decide` for a request that has just arrived (``now``: not aged, nothing of it
        run) alone on an idle device, at a resident model: the same rules as
        :meth:`_decide_lone`, on plain numbers, so the worker decides the common case at low
        load without building a snapshot (``tests/unit/pool/test_scheduling_policy.py`` checks
        the two agree). The worker checks the structural conditions (alone, idle, resident)
        before it asks; the rules, batching included, are here."""
        if misses_alone(now, deadline, rows * row_cost_s, pace):
            return ScheduleDecision(expired=(request_id,), reason="idle",
                                    too_short=(request_id,))
        if rows < max_batch_size and 0 < batch_wait_s and arrival_gap_s < batch_wait_s:
            return ScheduleDecision(wait_until=now + batch_wait_s, reason="batching")
        n = rows if rows < max_batch_size else max_batch_size
        chunk = self.chunk_rows(n, priority, row_cost_s=row_cost_s, chunk_size=chunk_size)
        # (positional: the request path's one decision, built without the keyword matching)
        return ScheduleDecision(model, (request_id,), n, chunk, priority, (), None,
                                self.alone_reason, chunk * row_cost_s if measured else 0.0)

    def _decide(self, snap: SchedulerSnapshot) -> ScheduleDecision:
        return self.plan(snap, limit=1)[0]

    def plan(self, snap: SchedulerSnapshot, *, limit: int,
             rooms: Sequence[int] = (1, 1, 1, 1)) -> list[ScheduleDecision]:
        """Up to ``limit`` decisions from one triage, for distinct models: the first as
        :meth:`decide` makes it (it carries the expired ids and the triage's live work), then
        the next models by their best-ranked request, each as if the batches before it had
        launched. A decision of a class with no room left (``rooms``, per ``Priority``
        value) is left out and its model stays queued; the plan ends at a batch still
        forming (a decision that waits) or when no room is left. A device that runs several
        batches at once (CUDA streams) fills its free slots at the cost of one triage instead
        of one per slot."""
        t = self.triaged(snap)
        expired, live = t.expired, t.live
        if not live:
            # Only loading models' work: wake up when the first of their requests expires
            # (a finished load wakes the worker sooner).
            pending = [r.deadline for r in _loading_requests(snap)
                       if r.deadline is not None and r.id not in expired]
            return [ScheduleDecision(expired=tuple(expired), reason="idle",
                                     wait_until=min(pending, default=None),
                                     too_short=tuple(t.too_short))]
        now = snap.now
        best = min(live, key=lambda k: self.rank(live[k][0], now))
        key, reason = self.choose_model(snap, live, best)
        by_key = {m.key: m for m in snap.models}
        first = self._batch(snap, by_key[key], live[key], reason, tuple(expired))
        first.live_s, first.tail_all, first.too_short = t.live_s, t.tail, tuple(t.too_short)
        out = [first]
        if limit > 1 and first.model is not None:
            self._more(snap, t, key, by_key, out, limit, rooms)
        first.tail = _tail_after(t, out)
        return out

    def _more(self, snap: SchedulerSnapshot, t: Triage, key: str, by_key: dict[str, ModelView],
              out: list[ScheduleDecision], limit: int, rooms: Sequence[int]) -> None:
        """The plan's decisions after the first (``out[0]``, for ``key``)."""
        now, live, first = snap.now, t.live, out[0]
        left = list(rooms)
        left[first.priority] -= 1
        heads = sorted((self.rank(reqs[0], now), k) for k, reqs in live.items() if k != key)
        for _, k in heads:
            if len(out) >= limit or not any(n > 0 for n in left):
                break
            reqs = live[k]
            if left[self.effective_class(reqs[0], now)] <= 0:
                continue  # its class's slots are full: it waits for the next completion
            d = self._batch(snap, by_key[k], reqs, "next", ())
            out.append(d)
            if d.model is None:
                break  # a batch forming: decide again when it is due
            left[d.priority] -= 1

    def _batch(self, snap: SchedulerSnapshot, model: ModelView, reqs: list[RequestView],
               reason: str, expired: tuple[int, ...]) -> ScheduleDecision:
        """The batch of ``model``'s live requests (rank order), or a wait while it forms."""
        key = model.key
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
        # Adaptive batching: wait for more rows only when another request is expected within
        # the wait (a lone caller on a quiet model runs at once instead of paying the wait).
        expect_more = model.arrival_gap_s < model.batch_wait_s
        if (rows < model.max_batch_size and snap.now < ready_at and expect_more
                and not any(r.started for r in reqs)):
            return ScheduleDecision(expired=expired, wait_until=ready_at, reason="batching")
        # Chunked by the head request's own class: aging buys an old request its turn, not
        # the right to hold the device against a fresh realtime arrival.
        chunk = self.chunk_rows(rows, reqs[0].priority, row_cost_s=model.row_cost_s,
                                chunk_size=snap.chunk_size)
        return ScheduleDecision(
            model=key,
            request_ids=tuple(ids),
            rows=rows,
            chunk_rows=chunk,
            priority=cls,
            expired=expired,
            reason=reason,
            work_s=chunk * model.row_cost_s if model.resident and model.measured else 0.0,
            cost_s=chunk * model.row_cost_s + (0.0 if model.resident else model.swap_cost_s),
        )


def _tail_after(t: Triage, plan: list[ScheduleDecision]) -> tuple | None:
    """The rank of the last live request with rows left once the plan's batches launch."""
    gone: set[int] = set()
    for d in plan:
        if d.model is None:
            continue
        rows = d.chunk_rows
        for r in t.live[d.model][:len(d.request_ids)]:  # (the batch: a prefix, rank order)
            if r.rows > rows:
                break
            rows -= r.rows
            gone.add(r.id)
    for rank, r in reversed(t.ranked):
        if r.id not in gone:
            return rank
    return None


def _loading_requests(snap: SchedulerSnapshot) -> list[RequestView]:
    return [r for m in snap.models if m.loading for r in m.requests]


def _misses_load(m: ModelView, r: RequestView, snap: SchedulerSnapshot) -> bool:
    # A loading model's request waits for the load, not behind the device's queue: refused when
    # even the rest of the load and its own work (at the device's pace) end past its deadline.
    # Once the load overruns its estimate (nothing left), that is its own work: about its
    # deadline, as the worker's wake-up (``decide``) expects.
    work = request_work_s(m, r, swap_paid=False)
    return r.deadline is not None and snap.now + work * snap.pace >= r.deadline


class PrioritySchedulingPolicy(SchedulingPolicy):
    """Priority classes with aging, EDF within a class, chunking and time slices.

    Aging: a request is promoted one class per ``aging_s`` waited, so nothing starves. A batch
    or background request that has spent ``promote_after`` of its budget (arrival to deadline)
    waiting is ranked one class up, never above interactive, and so by its deadline among
    that class's requests: at full load, strict classes leave the least urgent one to miss its
    deadline while the class above has time to spare. In ``benchmarks.overload_http`` at 1x
    capacity (500 ms deadlines) that raised the answers within the deadline from 0.948 to
    0.972 of capacity; interactive's p99 went from 187 to 426 ms, all within its deadline
    (``docs/OVERLOAD.md``). Realtime is never waited behind: no promotion reaches it before
    ``aging_s``. A request without a deadline is ranked within its class as if its deadline were
    ``arrival + soft_deadline_s``, so aged work eventually beats fresh work of the same class.

    Chunks: ``chunk_ms`` maps a class to the estimated work per chunk (None: whole batches); a
    single number applies to every class but realtime. Rows per chunk = ``chunk_ms`` / the
    model's measured cost per row, at least 1 and at most the snapshot's ``chunk_size``; while a
    model's cost per row is unknown (0), chunks are ``chunk_size`` rows.
    """

    name = "priority"
    displaces_waiting = True

    def __init__(
        self,
        *,
        aging_s: float = 2.0,
        soft_deadline_s: float = 8.0,
        promote_after: float = 0.5,
        chunk_ms: float | Mapping[Priority, float | None] | None = None,
    ) -> None:
        if aging_s <= 0 or soft_deadline_s <= 0:
            raise ValueError(
                f"aging_s and soft_deadline_s must be > 0, got {aging_s}, {soft_deadline_s}"
            )
        if not 0 < promote_after <= 1:
            raise ValueError(f"promote_after must be in (0, 1] (a share of the budget), got "
                             f"{promote_after}")
        self.aging_s = aging_s
        self.soft_deadline_s = soft_deadline_s
        self.promote_after = promote_after
        self.chunk_s = _chunk_budgets(chunk_ms)

    def effective_class(self, req: RequestView, now: float) -> Priority:
        waited = now - req.arrival
        if waited < self.aging_s:  # not aged (the common case): no enum construction
            if (req.priority > Priority.INTERACTIVE and req.deadline is not None
                    and waited > (req.deadline - req.arrival) * self.promote_after):
                return _ONE_UP[req.priority]
            return req.priority
        steps = int(waited // self.aging_s)
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

    def chunk_rows(self, rows, cls, *, row_cost_s, chunk_size):
        budget_s = self.chunk_s[cls]
        if budget_s is None:
            return rows  # e.g. realtime: nothing outranks it, no preemption point needed
        n = rows if rows < chunk_size else chunk_size  # (per decision: no min/max calls)
        if row_cost_s > 0:
            fits = budget_s / row_cost_s  # inf for a vanishing cost: no int() of that
            if fits < n:
                n = int(fits)
        return n if n > 1 else 1


def _chunk_budgets(chunk_ms) -> dict[Priority, float | None]:
    """Seconds of work per chunk for every class, from ``chunk_ms`` (see the policy)."""
    if chunk_ms is None:
        given: Mapping[Priority, float | None] = DEFAULT_CHUNK_MS
    elif isinstance(chunk_ms, Mapping):
        given = {**DEFAULT_CHUNK_MS, **{Priority(k): v for k, v in chunk_ms.items()}}
    else:
        given = {p: (None if p == Priority.REALTIME else float(chunk_ms)) for p in Priority}
    bad = {p.label: v for p, v in given.items() if v is not None and not v > 0}
    if bad:
        raise ValueError(f"chunk_ms must be > 0 (or None for whole batches), got {bad}")
    return {p: (None if v is None else v / 1e3) for p, v in given.items()}


class FifoSchedulingPolicy(SchedulingPolicy):
    """First come first served over all models, whole batches, no classes: the baseline."""

    name = "fifo"
    alone_reason = "oldest"

    def rank(self, req: RequestView, now: float) -> tuple:
        return (req.arrival, req.id)

    def choose_model(self, snap, live, best):
        return best, "oldest"

    def chunk_rows(self, rows, cls, *, row_cost_s, chunk_size):
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


def device_scheduling_policy(name: str, *, stream_priorities: bool) -> SchedulingPolicy:
    """The policy registered under ``name`` as a device runs it. Where the device's own stream
    priorities preempt (CUDA), ``priority`` runs every batch whole: the GPU schedules realtime
    kernels between background ones (measured on an H200: realtime p99 1.16x alone with
    background keeping 99.6 % of its throughput, against 1.42x and 23 % with host-side chunks).
    Elsewhere (the CPU stand-in) nothing else can preempt, so batches are chunked."""
    if stream_priorities and name == PrioritySchedulingPolicy.name:
        return get_scheduling_policy(name, chunk_ms={p: None for p in Priority})
    return get_scheduling_policy(name)
