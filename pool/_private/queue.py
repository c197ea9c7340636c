"""The device worker's queue state: per-model queues, their cost estimates, and snapshots.

Owned by one ``DeviceWorker`` and touched only on its event loop. The scheduling policy sees it
as an immutable ``SchedulerSnapshot``; routing stats are computed from the same snapshot with
the one queue-delay model in ``policies.estimates``.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import ItemsView, Mapping
from dataclasses import dataclass, field

import numpy as np

from common.fallback_types import DeadlineTooShort, RequestExpired
from policies.device_queue import ModelView, RequestView
from policies.estimates import ChunkCost, ewma
from policies.priority import Priority
from policies.scheduling import ScheduleDecision
from pool.class_window import ClassWindow
from pool.config import ModelConfig
from pool.types import ModelKey, Rows

__all__ = ["INITIAL_ROW_S", "ModelQueue", "Pending", "QueueState", "shown_row_s"]

INITIAL_ROW_S = 0.0005  # per-row cost assumed before a model's first run


@dataclass(slots=True)
class Pending:
    """One queued request and what has run of it so far."""

    id: int
    key: ModelKey
    inputs: Mapping[str, Rows]
    rows: int
    priority: Priority
    deadline: float | None
    arrival: float
    future: asyncio.Future = field(repr=False)
    done: int = 0  # rows answered (their batch completed)
    launched: int = 0  # rows handed to the device (answered or in flight)
    # (first row, outputs) per completed batch; batches of one request complete in launch order
    # on one stream, but a split request's batches may run on two streams (aging)
    parts: list[tuple[int, dict[str, Rows]]] = field(default_factory=list)
    compute_s: float = 0.0
    swap_s: float = 0.0
    first_start: float | None = None
    batch: int = 0
    as_numpy: bool = False  # numpy rows in, numpy rows out (the host's kind)
    # It arrived at an idle device (nothing queued, nothing in flight): if it misses, its own
    # work and the pool's fixed costs did, not other work (a refusal says DeadlineTooShort).
    idle: bool = False


@dataclass(slots=True)
class ModelQueue:
    """One model's queue and its measured costs."""

    config: ModelConfig
    key: ModelKey
    name: str = ""  # str(ModelKey): the name the policy and the residency know it by
    # The name of the model's one declared output (None: several): a single output tensor is
    # answered under it as is (answers), as ``name_outputs`` would name it.
    one_output: str | None = None
    listed: bool = False  # in QueueState.active
    queue: list[Pending] = field(default_factory=list)
    ewma_row_s: float = INITIAL_ROW_S
    measured_at: float | None = None  # clock time of the last measurement of ewma_row_s
    last_arrival: float | None = None
    ewma_gap_s: float = float("inf")  # inter-arrival time: does waiting for a batch pay?
    thread_runs: int = 0  # chunks measured on the device thread
    # The forward pass's CPU on the thread that ran it, fixed part and per row: what a chunk
    # costs run inline on the loop, for a graph proven bounded (the device thread's wall time,
    # ``ewma_row_s``, also holds its waits for the GIL and the cores; None until measured).
    cpu_cost: ChunkCost | None = None
    # Why this model never runs inline (a chunk stalled, or its graph is not proven bounded:
    # see DeviceSpec.inline_ms); None while it may.
    inline_refused: str | None = None
    graph_read: bool = False  # its graph was read for inline_bounded_only

    def arrived(self, now: float) -> None:
        last = self.last_arrival
        if last is not None:
            self.ewma_gap_s = ewma(self.ewma_gap_s, now - last)
        self.last_arrival = now


REFUSED = 0  # the counter of ``QueueState.classes``: requests refused unrun


class QueueState:
    """Every model's queue on one device, bounded by ``max_queue`` requests in all.
    ``classes``: the worker's per-class window, where refusals (queue full, or a deadline that
    cannot be met) are counted."""

    def __init__(self, max_queue: int, label: str = "", *,
                 classes: ClassWindow | None = None) -> None:
        self.label = label
        self.classes = classes
        self.models: dict[ModelKey, ModelQueue] = {}
        # The models with queued work (an entry may stay listed with an empty queue until the
        # next walk drops it): every walk per decision goes over these, so a decision costs in
        # proportion to the busy models, not to every registered one.
        self.active: dict[ModelKey, ModelQueue] = {}
        self.by_name: dict[str, ModelKey] = {}
        self.named: dict[str, ModelQueue] = {}  # str(key) -> entry, without hashing a key
        self._ids = itertools.count()
        self._max_queue = max_queue
        # At least the number of requests queued: submits add to it, and only a recount (when it
        # reaches the bound) lowers it, so the bound costs no walk over every model's queue.
        self._queued_at_most = 0

    def add(self, key: ModelKey, config: ModelConfig) -> None:
        entry = ModelQueue(config=config, key=key, name=str(key),
                           one_output=config.outputs[0].name if len(config.outputs) == 1
                           else None)
        self.models[key] = entry
        self.by_name[entry.name] = key
        self.named[entry.name] = entry

    def remove(self, key: ModelKey) -> ModelQueue | None:
        self.by_name.pop(str(key), None)
        self.named.pop(str(key), None)
        self.active.pop(key, None)
        return self.models.pop(key, None)

    def entry(self, name: str) -> ModelQueue | None:
        return self.named.get(name)

    def submit(self, entry: ModelQueue, inputs: Mapping[str, Rows], priority: Priority,
               deadline: float | None, now: float, future: asyncio.Future) -> Pending:
        """Queue a request for ``entry``'s model (the caller found it registered)."""
        if self._queued_at_most >= self._max_queue:
            self._queued_at_most = sum(len(e.queue) for _, e in self._busy())
            if self._queued_at_most >= self._max_queue:
                if self.classes is not None:
                    self.classes.count(priority, REFUSED)
                raise asyncio.QueueFull(f"{self.label}: {self._max_queue} requests queued")
        first = next(iter(inputs.values()))
        p = Pending(next(self._ids), entry.key, inputs, int(first.shape[0]),
                    priority if type(priority) is Priority else Priority(priority),
                    deadline, now, future, as_numpy=isinstance(first, np.ndarray))
        entry.arrived(now)
        entry.queue.append(p)
        if not entry.listed:
            entry.listed = True
            self.active[entry.key] = entry
        self._queued_at_most += 1
        return p

    def _busy(self) -> ItemsView[ModelKey, ModelQueue]:
        """The active models with a non-empty queue (drops the others from ``active``)."""
        active = self.active
        for e in active.values():
            if not e.queue:
                break
        else:
            return active.items()  # (the common case: nothing to drop, nothing to build)
        busy = {}
        for k, e in active.items():
            if e.queue:
                busy[k] = e
            else:
                e.listed = False
        self.active = busy
        return busy.items()

    def model_views(self, *, resident, swap_cost_s, stale,
                    loading=lambda _name: False) -> tuple[ModelView, ...]:
        """The queues as the scheduling policy sees them (cancelled requests dropped, and
        requests whose rows are all on the device left out: there is nothing left to decide).

        Only models with queued requests are described (``active``): an idle model cannot be
        chosen, and with many models registered (most of them idle) this keeps each decision
        cheap. A stale cost estimate is shown as the initial one, so expiry does not refuse on it.
        """
        models = []
        for _, entry in self._busy():
            entry.queue = [p for p in entry.queue if not p.future.done()]
            reqs = tuple([
                RequestView(p.id, p.priority, p.deadline, p.arrival, p.rows - p.launched,
                            p.launched > 0)
                for p in entry.queue if p.launched < p.rows
            ])
            if not reqs:
                continue
            name, is_stale = entry.name, stale(entry)
            is_resident = resident(name)
            models.append(ModelView(
                name, is_resident, reqs, entry.config.max_batch_size,
                entry.config.batch_wait_ms / 1e3,
                shown_row_s(entry, is_stale), 0.0 if is_resident else swap_cost_s(name),
                entry.ewma_gap_s, loading(name),
                entry.measured_at is not None and not is_stale,
            ))
        return tuple(models)

    def emptied(self, entry: ModelQueue) -> None:
        """``entry``'s queue is empty (its last request answered): it leaves ``active`` now,
        in one step, rather than by the next walk's rebuild of ``active``."""
        if entry.listed and not entry.queue:
            entry.listed = False
            self.active.pop(entry.key, None)

    def waiting(self) -> bool:
        """Some queued request has rows not yet on the device (cancelled ones may count)."""
        for _, e in self._busy():
            for p in e.queue:
                if p.launched < p.rows:
                    return True
        return False

    def chosen(self, d: ScheduleDecision) -> list[Pending]:
        """The decision's requests, in the decision's order."""
        entry = self.named.get(d.model or "")
        if entry is None:
            return []
        if len(d.request_ids) == 1:
            rid = d.request_ids[0]
            return [p for p in entry.queue if p.id == rid]
        order = {rid: i for i, rid in enumerate(d.request_ids)}
        return sorted((p for p in entry.queue if p.id in order), key=lambda p: order[p.id])

    def expire(self, ids: tuple[int, ...], too_short: tuple[int, ...] = ()) -> int:
        """Answer ``ids`` with RequestExpired (not run), those also in ``too_short`` with
        DeadlineTooShort; returns how many were dropped."""
        if not ids:
            return 0
        wanted, dropped = set(ids), 0
        short = set(too_short) if too_short else ()  # (usually none: no set built)
        for _, entry in self._busy():
            keep = []
            for p in entry.queue:
                if p.id in wanted:
                    if self.classes is not None and not p.future.done():
                        self.classes.count(p.priority, REFUSED)
                    fail(p, _refusal(p, p.id in short))
                    dropped += 1
                else:
                    keep.append(p)
            entry.queue = keep
        return dropped

    def refuse(self, entry: ModelQueue, p: Pending, too_short: bool = False) -> int:
        """Answer ``p``, just queued on ``entry`` and not run, with RequestExpired: its
        deadline cannot be met (DeadlineTooShort where ``too_short``: not even alone);
        :meth:`expire` for one arrival, without a walk."""
        queue = entry.queue
        if queue and queue[-1] is p:
            queue.pop()
        elif p in queue:
            queue.remove(p)
        if p.future.done():
            return 0
        if self.classes is not None:
            self.classes.count(p.priority, REFUSED)
        fail(p, _refusal(p, too_short))
        return 1

    def most_urgent(self) -> Priority | None:
        """The most urgent class with rows still to launch (None: nothing waits)."""
        best: Priority | None = None
        for _, e in self._busy():
            for p in e.queue:
                if p.launched < p.rows and (best is None or p.priority < best):
                    if p.priority == Priority.REALTIME:
                        return p.priority
                    best = p.priority
        return best

    def queued_classes(self) -> dict[str, Priority]:
        """The most urgent queued class of each model with work (eviction rights)."""
        return {str(k): min(p.priority for p in e.queue) for k, e in self._busy()}

    def has_started(self, name: str) -> bool:
        """A request of ``name`` has rows on the device and rows still to launch (preempted
        if left; one whose rows are all launched is not, though its batch is still running)."""
        entry = self.entry(name)
        return bool(entry and any(0 < p.launched < p.rows and not p.future.done()
                                  for p in entry.queue))

    def fail_all(self, error: BaseException) -> None:
        for entry in self.models.values():
            for p in entry.queue:
                fail(p, error)

    @staticmethod
    def take_rows(chosen: list[Pending], budget: int) -> list[tuple[Pending, int, int]]:
        """(request, first row, rows) parts of up to ``budget`` rows, in order."""
        parts = []
        for p in chosen:
            if budget <= 0:
                break
            n = min(p.rows - p.launched, budget)
            if n > 0:
                parts.append((p, p.launched, n))
                budget -= n
        return parts


def shown_row_s(entry: ModelQueue, stale: bool) -> float:
    """The cost per row the scheduler sees: a stale estimate shows as the initial one, so
    expiry does not refuse on it."""
    return INITIAL_ROW_S if stale else entry.ewma_row_s


def _refusal(p: Pending, too_short: bool) -> RequestExpired:
    if too_short:
        return DeadlineTooShort(f"{p.key}: its deadline is shorter than its own estimated work "
                                "on this device (not run): ask for a longer deadline")
    return RequestExpired(f"{p.key}: deadline cannot be met behind the queued work (not run)")


def fail(p: Pending, error: BaseException) -> None:
    if not p.future.done():
        p.future.set_exception(error)
