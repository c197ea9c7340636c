"""The per-device worker: decides, launches, and answers when the device is done.

Three visible steps (vLLM's schedule / execute / update_from_output), none of which waits on
the device:

1. **schedule** — an immutable snapshot of the queues (``pool._private.queue``) goes to the
   scheduling policy (``policies.scheduling``), which returns a ``ScheduleDecision``;
2. **launch** — expired requests are answered, the chosen model is made resident (evicting
   others through ``Residency``; the copy itself runs on the device side, before the forward
   pass) and a :class:`~pool._private.chunk.Batch` of the chosen rows goes to the device's
   executor (``pool._private.executor``), which returns at once. While the executor has room
   the worker decides and launches again (on CUDA several batches of several models and
   classes are in flight, and stream priorities preempt; on the CPU stand-in one thread is the
   device, one batch at a time, and preemption is the scheduler's, at chunk boundaries);
3. **update** — when the executor reports a batch done (on the loop), its outputs are split
   back to their requests, finished ones answered, the model's cost per row (EWMA) and the
   device's pace (``policies.estimates.Pace``) refreshed, and step 1 runs again.

The steps run from the events that change what can be decided: an arrival, a completion, a
finished disk load, or the policy's own timer (a batch forming). There is no loop task; a
decision costs in proportion to the models with queued work (``QueueState.active``). An
arrival alone on an idle device, at a resident model that is not forming a batch (the common
case at low load), skips the snapshot: the policy rules on plain numbers
(``SchedulingPolicy.decide_arrival``, checked to agree with ``decide``) and step 2 follows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from common.fallback_types import RequestExpired
from policies.device_queue import ModelView, RequestView, SchedulerSnapshot
from policies.estimates import ChunkCost, Pace, ewma, queue_delay_by_class
from policies.eviction import EvictionPolicy
from policies.inline import Arrival, TickGather, waits_for_the_thread
from policies.priority import Priority
from policies.scheduling import (
    ScheduleDecision,
    SchedulingPolicy,
    device_scheduling_policy,
    misses_alone,
)
from pool._private.answers import answer_batch
from pool._private.chunk import (
    INLINE_AFTER_RUNS,
    Batch,
    BatchBuilder,
    warm_up,
    warmed_loader,
)
from pool._private.cuda_executor import CudaExecutor
from pool._private.device_memory import DeviceMemory
from pool._private.executor import DeviceExecutor, ThreadExecutor
from pool._private.loads import BackgroundLoads
from pool._private.queue import ModelQueue, Pending, QueueState, fail, shown_row_s
from pool._private.reporting import worker_counters, worker_status
from pool._private.residency import Residency
from pool.class_window import ClassWindow
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory, ModelLoadError, ModelNotLoaded
from pool.types import DeviceCounters, ModelKey, RoutingStats, Rows, WorkResult

__all__ = ["INLINE_AFTER_RUNS", "DeviceWorker"]


CLASS_SERIES = ("queue", "compute", "swap")  # recorded per answered request (answers.finish)
_PUMP_STEPS = 64  # decisions per pump before yielding to the loop (a bound, not a tuning knob)


def _policy(scheduler: str | SchedulingPolicy, device: DeviceSpec) -> SchedulingPolicy:
    if not isinstance(scheduler, str):
        return scheduler
    return device_scheduling_policy(scheduler, stream_priorities=device.kind == "cuda")


ExecutorFactory = Callable[[DeviceSpec, Residency, Callable[[Batch], None]], DeviceExecutor]


def _executor(device: DeviceSpec, tiers: Residency, on_done: Callable[[Batch], None]
              ) -> DeviceExecutor:
    if device.kind == "cuda":
        return CudaExecutor(device, tiers, on_done)
    return ThreadExecutor(device, tiers, on_done)


class DeviceWorker:
    """Runs the models registered on one device. All methods are called on one event loop.

    ``scheduler`` names a policy in ``policies.scheduling`` (``priority`` or ``fifo``; on CUDA
    ``priority`` runs batches whole) or is a policy object; ``eviction`` is an
    ``EvictionPolicy`` (default priority-aware LRU); ``memory`` overrides the device memory
    (tests). Queues are bounded by ``max_queue`` requests per device; beyond it ``infer``
    raises ``asyncio.QueueFull``. A model's per-row cost estimate that no run has refreshed
    for ``estimate_ttl_s`` no longer refuses work: the next request runs and its measurement
    replaces the estimate (so one hang costs at most one slow run per TTL, instead of the model
    being refused forever once its estimate exceeds its callers' budgets). ``executor`` builds
    the device's executor (default: a ``CudaExecutor`` on CUDA, a ``ThreadExecutor`` on CPU;
    tests inject one that completes batches on demand).
    """

    def __init__(
        self,
        device: DeviceSpec,
        *,
        clock: Callable[[], float] = time.monotonic,
        scheduler: str | SchedulingPolicy = "priority",
        eviction: EvictionPolicy | None = None,
        memory: DeviceMemory | None = None,
        max_queue: int = 100_000,
        estimate_ttl_s: float = 2.0,
        executor: ExecutorFactory | None = None,
    ) -> None:
        if estimate_ttl_s <= 0:
            raise ValueError(f"estimate_ttl_s must be > 0, got {estimate_ttl_s}")
        self.device = device
        self._label = device.label  # (a property: read once, not per answer)
        self._estimate_ttl_s = estimate_ttl_s
        self._clock = clock
        self.policy = _policy(scheduler, device)
        self.tiers = Residency(device, memory=memory, eviction=eviction, clock=clock)
        self.batches = BatchBuilder(device, self.tiers)
        self.executor = (executor or _executor)(device, self.tiers, self._completed)
        # (FIFO: a realtime batch launched after a background one that has not started yet
        # must not start before it)
        self.executor.class_order = self.policy.displaces_waiting
        # Per class over the last 30-36 s: queue wait, compute and swap-in of every answered
        # request, and refusals (the status views; fixed memory, pool.class_window).
        self.classes = ClassWindow(series=CLASS_SERIES, counters=("refused",), clock=clock)
        self.queues = QueueState(max_queue, device.label, classes=self.classes)
        self._closed = False
        self._pumping = False
        self._gather = TickGather() if self.batches.inline_s else None  # CPU inline only
        self._timer: asyncio.TimerHandle | None = None
        self._current: str | None = None
        self.pace = Pace()  # how far behind its estimates this device runs (triage, stats)
        self._running: set[int] = set()  # ids of requests with rows on the device
        self._retiring: set[str] = set()  # removed while a batch of it was on the device
        self._retired: dict[str, asyncio.Event] = {}  # set once a retiring model is forgotten
        self._blocked = False  # a swap-in waits for room held by batches in flight
        self._held = False  # a chunk waits for the device thread's batch, to run inline
        # The last triage's live work, less what launched since, plus the arrivals admitted
        # since, and the rank of the last live request: what an arrival at a full device is
        # judged against in constant time (``_admit``).
        self._live_s = 0.0
        self._tail: tuple | None = None
        self._triage_due = False
        self._pump_due = False
        self._loads = BackgroundLoads(self.tiers, clock, self._loaded)  # disk loads off the loop
        self._slice_start = 0.0
        self._last: str | None = None
        self.preemptions = 0
        self.preempted_by = [0, 0, 0, 0]  # preemptions by the class that took the device
        self.incarnation = uuid.uuid4().hex[:12]  # tells a restarted replica's counters apart
        self.expired = 0
        self.requeued = 0  # batches given back by the executor before they started
        self.chunks = 0  # batches completed
        self.compute_s = 0.0  # their forward passes' device time (``Batch.device_s``), summed
        self.inline_chunks = 0
        self.inline_waits = 0  # (policies.inline.waits_for_the_thread)

    # -- models -----------------------------------------------------------------------------
    async def add_model(
        self, key: ModelKey, config: ModelConfig, loader: Callable[[], nn.Module], *,
        source: str | None = None,
    ) -> None:
        """Load into the host tier (off the event loop), validate with a warm-up forward pass.

        The model becomes resident on the device on first use (or at once if it fits without
        evicting anything). Raises ModelLoadError for a model that fails to load or run, naming
        ``source`` (the weight file, as the repository names it) or else the key.
        """
        where = source or str(key)
        try:
            packed, load_s = await self.tiers.load(loader)
        except ModelLoadError:
            raise
        except Exception as e:  # a broken model marks that model, not the process
            raise ModelLoadError(where, f"load failed: {type(e).__name__}: {e}",
                                 field="format") from e
        try:
            await self.executor.call(warm_up, packed.module, config)
        except Exception as e:  # the config's inputs, fed to the model, did not run
            raise ModelLoadError(where, f"warm-up failed: {type(e).__name__}: {e}",
                                 field="inputs") from e
        if key in self.queues.models:
            await self.remove_model(key)
        name = str(key)
        if name in self._retiring:  # the old version's last batch is still on the device
            retired = self._retired.setdefault(name, asyncio.Event())
            await retired.wait()
        reload = warmed_loader(loader, config, threads=self.batches.threads)
        self.tiers.register(name, reload, config.priority, packed, load_s)
        self.queues.add(key, config)
        if self.tiers.memory.free_bytes >= packed.nbytes:
            try:
                await self.tiers.ensure(name, config.priority, {})
            except DeviceOutOfMemory:
                pass  # stays in the host tier; swapped in on demand

    async def remove_model(self, key: ModelKey) -> None:
        entry = self.queues.remove(key)
        if entry is None:
            return
        name = str(key)
        if name in self.tiers.memory.running_keys():
            # A batch of it is on the device: its region is freed when that batch is done.
            self._retiring.add(name)
        else:
            self.tiers.forget(name)
        for p in entry.queue:
            fail(p, ModelNotLoaded(f"{key} was unloaded"))

    def has_model(self, key: ModelKey) -> bool:
        return key in self.queues.models

    # -- requests ---------------------------------------------------------------------------
    async def infer(
        self,
        key: ModelKey,
        inputs: Mapping[str, Rows],
        *,
        priority: Priority = Priority.INTERACTIVE,
        deadline: float | None = None,
    ) -> WorkResult:
        """Queue ``inputs`` (batch-first CPU tensors, or numpy arrays) and wait for this
        request's outputs, of the same kind as the inputs.

        Raises RequestExpired (deadline, an absolute ``clock`` time, cannot be met),
        DeviceOutOfMemory, ModelNotLoaded, QueueFull.
        """
        entry = self.queues.models.get(key)
        if entry is None:
            raise ModelNotLoaded(f"model {key} is not loaded on {self.device.label}")
        if not inputs:
            raise ValueError("inputs must name at least one tensor")
        fut = asyncio.get_running_loop().create_future()
        now = self._clock()
        p = self.queues.submit(entry, inputs, priority, deadline, now, fut)
        if self.executor.in_flight == 0:
            p.idle = len(entry.queue) == 1 and len(self.queues.active) == 1
            gather = self._gather
            if gather is not None:  # an inline device: wait for this tick's company?
                how = gather.arrive()
                if how is Arrival.GATHER:
                    asyncio.get_running_loop().call_soon(self._tick_in, p, entry)
                    return await fut
                if how is Arrival.JOIN:
                    return await fut
                if how is Arrival.NOW_WATCH:
                    asyncio.get_running_loop().call_soon(gather.tick_over)
            if self._launch_alone(p, entry):
                return await fut  # decided and launched (or refused) without a snapshot
        if not self._room_for(priority):
            # The device is full: judge the arrival now rather than at the next completion, so
            # one that cannot make it is refused on arrival even behind a long batch or swap-in.
            if self._admit(p, entry, now) is None:
                self._triage_soon()
        else:
            self._pump()
        return await fut

    def _room_for(self, priority: Priority) -> bool:
        """Whether an arrival of this class can be decided on now: a free slot of its class
        where the device runs several batches at once (a stream per class) or where it may
        displace a less urgent batch waiting to start; elsewhere any free slot. False while a
        chunk waits for the device thread to run inline (``_held``): the completion decides."""
        if self._held:
            return False
        ex = self.executor
        if ex.concurrent or (ex.displaces and self.policy.displaces_waiting):
            return ex.has_room(priority)
        return ex.has_any_room()

    def _admit(self, p: Pending, entry: ModelQueue, now: float) -> bool | None:
        """``SchedulingPolicy.admit_arrival`` for ``p``, in constant time: against the live
        work the last triage kept (less what launched since, plus the arrivals kept since) and
        the work launched ahead of its class that has not started. False: refused here
        (DeadlineTooShort where its own work alone misses, ``misses_alone``); None: a triage
        decides."""
        name = entry.name
        if name in self._loads or self.tiers.loading(name):
            return None  # waits for its load, not behind the queue
        work = p.rows * shown_row_s(entry, self._stale(entry, now))
        swap = 0.0 if self.tiers.is_resident(name) else self._loads.swap_cost_s(name)
        ex = self.executor
        policy = self.policy
        rank = policy.rank(RequestView(p.id, p.priority, p.deadline, p.arrival, p.rows), now)
        verdict = policy.admit_arrival(
            now=max(now, ex.busy_until()), deadline=p.deadline, rank=rank, work_s=work,
            swap_s=swap, swap_paid=len(entry.queue) > 1,
            live_s=self._live_s + ex.launched_s()[p.priority], tail=self._tail,
            pace=self.pace.factor)
        if verdict:
            self._live_s += work if len(entry.queue) > 1 else work + swap
            if self._tail is None or rank > self._tail:
                self._tail = rank
        elif verdict is False:
            self.expired += self.queues.refuse(
                entry, p, misses_alone(now, p.deadline, work + swap, self.pace.factor))
        return verdict

    def _pump_soon(self) -> None:
        """One pump at the loop's next turn, for every event of this turn that asks for one:
        on a device that runs several batches at once, completions that come back together
        free several slots, filled from one triage (``_round``) instead of one each."""
        if not self._pump_due:
            self._pump_due = True
            asyncio.get_running_loop().call_soon(self._due_pump)

    def _due_pump(self) -> None:
        self._pump_due = False
        self._pump()

    def _triage_soon(self) -> None:
        """One triage at the loop's next turn for every arrival that needs one (a triage's
        cost grows with the queue: never one per arrival)."""
        if not self._triage_due:
            self._triage_due = True
            asyncio.get_running_loop().call_soon(self._due_triage)

    def _due_triage(self) -> None:
        self._triage_due = False
        if self._closed:
            return
        if self._has_room():
            self._pump()  # (its decision triages)
        else:
            self._triage_now()

    def _tick_in(self, first: Pending, entry: ModelQueue) -> None:
        """The deferred launch (``policies.inline``): ``first`` alone takes the arrival's
        short path; several requests of this tick go through the pump, as one batch."""
        queued = sum(len(e.queue) for e in self.queues.active.values())
        assert self._gather is not None
        self._gather.gathered(queued)
        if queued == 1 and entry.queue and entry.queue[0] is first \
                and self._launch_alone(first, entry):
            return
        self._pump()

    def _triage_now(self) -> None:
        t = self.policy.triaged(self.snapshot())
        self._live_s, self._tail = t.live_s, t.tail
        self.expired += self.queues.expire(tuple(i for i in t.expired if i not in self._running),
                                           tuple(t.too_short))

    def routing_stats(self) -> RoutingStats:
        """Load view for the request router and spill: the same estimate the scheduler uses."""
        snap = self.snapshot()
        models = snap.models
        depth = list(self.executor.launched_depth())  # waiting at the device, then queued
        for m in models:
            for r in m.requests:
                depth[r.priority] += 1
        mem = self.tiers.memory
        return RoutingStats(
            device=self.device.label,
            resident=frozenset(mem.resident_keys()),
            queue_delay_s=self._queue_delay_s(models, snap.pace),
            queue_depth=(depth[0], depth[1], depth[2], depth[3]),
            memory_free_bytes=mem.free_bytes,
            memory_total_bytes=mem.capacity_bytes,
            hosted=frozenset(self.tiers.host_keys()),
            replica=self.incarnation,
            swaps=self.tiers.stats.swaps,
            row_cost_s={m.key: m.row_cost_s for m in models if m.row_cost_s > 0},
        )

    def _queue_delay_s(self, models: Sequence[ModelView], pace: float
                       ) -> tuple[float, float, float, float]:
        """Each class's estimated wait: its queue's, then the batches launched ahead of it."""
        rt, it, bt, bg = queue_delay_by_class(models, pace=pace)
        a_rt, a_it, a_bt, a_bg = self.executor.launched_s()
        return (rt + a_rt * pace, it + a_it * pace, bt + a_bt * pace, bg + a_bg * pace)

    @property
    def policy_name(self) -> str:
        return self.policy.name

    @property
    def pace_factor(self) -> float:
        return self.pace.factor

    def counters(self) -> DeviceCounters:
        """Cumulative counters and current gauges (``DeviceCounters``) for metrics and alerts."""
        return worker_counters(self)

    def status(self) -> dict:
        """Resident and host-tier models, queue depths, swaps, preemptions, memory."""
        return worker_status(self)

    async def close(self) -> None:
        self._closed = True
        self._loads.cancel()
        if self._timer is not None:
            self._timer.cancel()
        self.queues.fail_all(ModelNotLoaded("worker closed"))
        self.executor.close()

    # -- schedule -----------------------------------------------------------------------------
    def _stale(self, entry: ModelQueue, now: float | None = None) -> bool:
        return (entry.measured_at is not None
                and (self._clock() if now is None else now) - entry.measured_at
                > self._estimate_ttl_s)

    def snapshot(self) -> SchedulerSnapshot:
        """The queues as the scheduling policy sees them (see ``QueueState.model_views``), at
        the moment a batch launched now would start: after the one running, where the
        executor keeps the next at hand (so a request that would miss its deadline by then is
        expired now, not launched to be skipped)."""
        models = self.queues.model_views(resident=self.tiers.is_resident,
                                         swap_cost_s=self._loads.swap_cost_s, stale=self._stale,
                                         loading=self._loading)
        return SchedulerSnapshot(
            max(self._clock(), self.executor.busy_until()), models, self._current,
            self._slice_start,
            self.device.slice_ms / 1e3, self.device.chunk_size, self.pace.factor,
        )

    def _has_room(self) -> bool:
        """Room for a decision: for any class, or for the most urgent one queued where the
        policy lets it displace a less urgent batch waiting at the device (``ThreadExecutor``).
        False while a chunk waits for the device thread (``_held``): its completion pumps."""
        if self._held:
            return False
        ex = self.executor
        if ex.has_any_room():
            return True
        if not (ex.displaces and self.policy.displaces_waiting):
            return False  # (no scan of the queues for a room that cannot open)
        urgent = self.queues.most_urgent()
        return urgent is not None and ex.has_room(urgent)

    def _pump(self) -> None:
        """Decide and launch while the executor has room (steps 1 and 2). Re-entrant calls
        (an inline batch completing inside) return at once: the outer loop goes on."""
        if self._pumping or self._closed:
            return
        self._pumping = True
        try:
            for _ in range(_PUMP_STEPS):
                if not self._has_room():
                    return
                acted = self._round()
                if acted is None:
                    return
                if acted:
                    break  # an inline batch never yielded: let arrivals in first
            asyncio.get_running_loop().call_soon(self._pump)  # bounded: let others in first
        finally:
            self._pumping = False

    def _round(self) -> bool | None:
        """One triage and the launches it decides: one batch, or where the executor runs
        several at once (CUDA) one per free slot, for distinct models
        (``SchedulingPolicy.plan``). None: nothing more to do until an event; True: a batch
        ran inline; False: decide again."""
        ex = self.executor
        limit = ex.launch_limit()
        snap = self.snapshot()
        plan = (self.policy.plan(snap, limit=limit, rooms=ex.rooms()) if limit > 1
                else [self.policy.decide(snap)])
        first = plan[0]
        self.expired += self.queues.expire(first.expired, first.too_short)
        live_s, acted, launched = first.live_s, False, 0
        try:
            for d in plan:
                if d.model is None:
                    self._wake_at(d.wait_until)
                    return None
                if not ex.has_room(d.priority):
                    continue  # its class's stream is full: a completion pumps again
                if self._blocked:
                    return None  # a swap-in waits for a running model to finish
                if self._waits_to_run_inline(d):
                    self._held = True
                    self.inline_waits += 1
                    return None
                acted = True
                try:
                    ran_inline = self._launch(d)
                except Exception as e:  # noqa: BLE001 - contained: fail this decision's requests
                    for p in self.queues.chosen(d):
                        fail(p, e)
                    continue
                live_s -= d.cost_s
                launched += 1
                if ran_inline:
                    return True
        finally:
            # (the last live rank the plan leaves, unless a batch of it stayed queued)
            every = launched == sum(1 for d in plan if d.model is not None)
            self._live_s = max(0.0, live_s)
            self._tail = first.tail if every else first.tail_all
        if not acted or len(plan) < limit:
            return None  # (a shorter plan: no other live work had a free slot)
        return False

    def _waits_to_run_inline(self, d: ScheduleDecision) -> bool:
        """``policies.inline.waits_for_the_thread`` for ``d``'s chunk, at a resident model."""
        if not self.batches.inline_s or not self.executor.in_flight:
            return False
        name = d.model
        assert name is not None
        return (self.tiers.is_resident(name) and name not in self._loads
                and waits_for_the_thread(self.executor.in_flight, self.batches.fits_inline(
                    self.queues.named[name], d.chunk_rows)))

    def _launch_alone(self, p: Pending, entry: ModelQueue) -> bool:
        """Steps 1 and 2 for the common case at low load, without a snapshot: ``p`` alone on an
        idle device, at a resident model (``entry``'s). The policy's verdict on plain numbers
        (``SchedulingPolicy.decide_arrival``, the same rules as its ``decide``), then the
        launch, or its timer while a batch forms. False when those conditions do not hold: the
        general pump decides."""
        if (self._pumping or self._blocked or self._closed or len(self.queues.active) != 1
                or len(entry.queue) != 1):
            return False
        name, config = entry.name, entry.config
        if not self.tiers.is_resident(name) or name in self._loads:
            return False
        measured_at = entry.measured_at
        stale = measured_at is not None and p.arrival - measured_at > self._estimate_ttl_s
        d = self.policy.decide_arrival(
            now=p.arrival, model=name, request_id=p.id, priority=p.priority,
            deadline=p.deadline, rows=p.rows, max_batch_size=config.max_batch_size,
            row_cost_s=shown_row_s(entry, stale), measured=measured_at is not None
            and not stale, chunk_size=self.device.chunk_size, pace=self.pace.factor,
            batch_wait_s=config.batch_wait_ms / 1e3, arrival_gap_s=entry.ewma_gap_s)
        if d.model is None:
            self.expired += self.queues.expire(d.expired, d.too_short)
            self._wake_at(d.wait_until)  # a batch forming: decide again when it is due
            return True
        if not self.executor.has_room(d.priority):
            return False
        try:
            self._launch(d, entry, [p])
        except Exception as e:  # noqa: BLE001 - contained, as in _pump: fail this request
            fail(p, e)
            return True
        self._live_s, self._tail = 0.0, None  # (the queue held this request alone)
        if p.launched < p.rows:
            self._pump()  # its next chunks, while the executor has room
        return True

    def _wake_at(self, when: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if when is not None:
            delay = max(0.0, when - self._clock())
            self._timer = asyncio.get_running_loop().call_later(delay, self._pump)

    # -- launch ---------------------------------------------------------------------------------
    def _launch(self, d: ScheduleDecision, entry: ModelQueue | None = None,
                chosen: list[Pending] | None = None) -> bool:
        """Step 2: make the decision's model resident and hand a batch to the executor.
        True when the batch ran inline (it is answered already). ``entry`` and ``chosen``:
        the model's queue and the decision's requests, when the caller holds them."""
        name = d.model
        assert name is not None
        if entry is None:
            entry = self.queues.named[name]
        if self._last != name:
            if self._last is not None and self.queues.has_started(self._last):
                self.preemptions += 1
                self.preempted_by[d.priority] += 1
            self._last = name
        tiers = self.tiers
        try:
            if tiers.use_resident(name):
                swap = None
            elif not tiers.can_reserve(name):
                # On disk (the host tier dropped it), or a swap of it already in flight: load it
                # off the loop and serve resident models meanwhile; the policy sees it loading
                # until then.
                self._loads.start(name)
                return False
            else:
                # From the host tier: evict and reserve now; the copy runs on the device side.
                swap = tiers.reserve(name, d.priority, self.queues.queued_classes())
        except DeviceOutOfMemory as e:
            if self.executor.in_flight:
                # What must leave is still running (batches in flight on CUDA): wait for a
                # completion rather than refuse; it decides again.
                self._blocked = True
                return False
            for p in entry.queue:
                if p.id not in self._running:
                    fail(p, e)
            return False
        now = self._clock()
        if name != self._current:
            self._current = name
            self._slice_start = now
        parts = self.queues.take_rows(self.queues.chosen(d) if chosen is None else chosen,
                                      d.chunk_rows)
        if not parts:  # every chosen request was cancelled
            if swap is not None:
                tiers.abort(swap)
            return False
        running = self._running
        for p, _, n in parts:
            if p.first_start is None:
                p.first_start = now
            p.launched += n
            running.add(p.id)
        b = self.batches.build(name, entry, parts, d.priority, swap, d.work_s, now,
                               alone=self.executor.in_flight == 0)
        tiers.memory.start_running(name)
        # (inline_s 0: the call skipped; never beside a batch on the device thread)
        if self.batches.inline_s and b.alone and self.batches.runs_inline(b):
            self.batches.run_inline(b)
            self._completed(b)
            return True
        displaced = self.executor.launch(b)
        if displaced is not None:
            self._requeue(displaced)
        return False

    def _requeue(self, b: Batch) -> None:
        """``b`` was launched and never started: the executor gave it back to make room for
        more urgent work. Its rows are queued again (its requests keep their place)."""
        self.tiers.memory.stop_running(b.name)
        if b.swap is not None:
            self.tiers.abort(b.swap)  # reserved, never copied
        running = self._running
        for p, _, n in b.parts:
            p.launched -= n  # (its rows were the last launched: the next take starts there)
            if p.launched == 0:
                running.discard(p.id)
                p.first_start = None
        self.requeued += 1

    # -- update -----------------------------------------------------------------------------
    def _completed(self, b: Batch) -> None:
        """Step 3, on the loop: the device is done with ``b``: refresh the estimates (so the
        next decision, even for a request its caller sends at once, sees this measurement),
        answer its requests, and decide again when work is waiting."""
        self.tiers.memory.stop_running(b.name)
        self._blocked = self._held = False
        if b.error is not None and self._retry_after_oom(b):
            return
        running = self._running
        for p, _, _ in b.parts:
            running.discard(p.id)
        if b.error is not None:
            if b.swap is not None:
                self.tiers.abort(b.swap)  # the weights may be half-copied: never run them
            if isinstance(b.error, RequestExpired):  # not run: it waited past its deadlines
                self.expired += sum(1 for p, _, _ in b.parts if not p.future.done())
            for p, _, _ in b.parts:
                fail(p, b.error)
            b.entry.queue = [p for p in b.entry.queue if not p.future.done()]
        else:
            self._account(b)
            if b.swap is not None:  # close the swap-in, then give each request its rows
                b.swap_s += self.tiers.swapped(b.swap, b.copy_s)
                b.swap = None
            answer_batch(b, self._label, self.classes)
            if not b.entry.queue:
                self.queues.emptied(b.entry)
        if b.name in self._retiring and b.name not in self.tiers.memory.running_keys():
            self._retiring.discard(b.name)
            self.tiers.forget(b.name)
            retired = self._retired.pop(b.name, None)
            if retired is not None:
                retired.set()
        # (an inline batch is already inside a pump: no-op; no model listed: nothing waits)
        if self.queues.active and self.queues.waiting():
            if self.executor.concurrent:
                self._pump_soon()  # one round for every completion of this turn of the loop
            else:
                self._pump()

    def _retry_after_oom(self, b: Batch) -> bool:
        """CUDA out of memory: evict every idle model and run the batch once more (True), or
        turn the error into DeviceOutOfMemory for the callers (False)."""
        if not isinstance(b.error, torch.cuda.OutOfMemoryError):
            return False
        if b.swap is not None:  # only the forward pass allocates: the weights are in place
            b.swap_s = self.tiers.swapped(b.swap, b.copy_s)
            b.swap = None
        if b.retried or self._closed:
            b.error = DeviceOutOfMemory(f"{b.name}: CUDA out of memory after evicting")
            return False
        self.tiers.evict_idle(keep=b.name)
        torch.cuda.empty_cache()
        b.error, b.retried, b.raw = None, True, None
        b.alone = False
        self.tiers.memory.start_running(b.name)
        self.executor.launch(b)
        return True

    def _account(self, b: Batch) -> None:
        """Refresh the estimates from ``b``."""
        entry = b.entry
        now = self._clock()
        self.tiers.memory.touch(b.name, now)
        self.chunks += 1
        self.compute_s += b.device_s
        if b.inline:
            self.inline_chunks += 1
        else:
            entry.thread_runs += 1
        if self.batches.inline_s:  # only a model that may run inline can stall the loop
            stall = self.batches.stall(b)
            if stall is not None:
                entry.inline_refused = stall
        # The cost per row sizes chunks in time: measured on the device side, so the hops and
        # event-loop delays (which vary with load, not with rows) do not shrink chunks. A stale
        # estimate (a long-idle model, or one slowed by a past stall) is replaced whole.
        stale = self._stale(entry, now)
        entry.ewma_row_s = ewma(None if stale else entry.ewma_row_s, b.device_s / max(b.rows, 1))
        if b.device_cpu_s is not None:
            cpu = entry.cpu_cost
            if cpu is None:
                entry.cpu_cost = ChunkCost.first(rows=b.rows, cost_s=b.device_cpu_s)
            elif stale:
                cpu.restart(rows=b.rows, cost_s=b.device_cpu_s)
            else:
                cpu.observe(rows=b.rows, cost_s=b.device_cpu_s)
        entry.measured_at = now
        if b.alone and b.work_s:
            # Launch to completion against what the decision estimated: the hops and loop
            # delays the estimates leave out (only a batch that had the device alone).
            self.pace = self.pace.observe(wall_s=now - b.launched_at, work_s=b.work_s)

    def _loading(self, name: str) -> bool:
        # Ours from the moment the task is created (before it first runs), or a swap-in that
        # another caller (add_model) has in flight.
        return name in self._loads or self.tiers.loading(name)

    def _loaded(self, name: str, error: BaseException | None) -> None:
        entry = self.queues.entry(name)
        if error is not None and entry is not None:
            for p in entry.queue:
                fail(p, error)
        self._pump()
