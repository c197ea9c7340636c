"""The per-device worker: the loop that turns scheduling decisions into chunks and feeds back.

One asyncio loop per device, in three visible steps per turn (vLLM's schedule / execute /
update_from_output):

1. **schedule** — an immutable snapshot of the queues (``pool._private.queue``) goes to the
   scheduling policy (``policies.scheduling``), which returns a ``ScheduleDecision``;
2. **execute** — expired requests are answered, the chosen model is made resident (swapping
   others out through ``Residency``) and one chunk of rows runs (``pool._private.chunk``);
3. **update** — the chunk's outputs are split back to their requests, finished ones answered,
   and the model's cost estimate (per row, EWMA) refreshed for the next decision; the device's
   pace (``policies.estimates.Pace``: wall time from one decision to the next over the chunk's
   estimated work) learns how far behind those estimates the device runs.

Requests may be split over several chunks; each gets its own rows back. On CUDA, chunks run on a
stream whose priority follows the request class.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping

from torch import nn

from policies.estimates import Pace, ewma, queue_delay_by_class
from policies.eviction import EvictionPolicy
from policies.priority import Priority
from policies.scheduling import (
    ScheduleDecision,
    SchedulerSnapshot,
    SchedulingPolicy,
    get_scheduling_policy,
)
from pool._private.chunk import (
    INLINE_AFTER_RUNS,
    ChunkOutput,
    ChunkRunner,
    device_thread,
    join_rows,
    warm_up,
    warmed_loader,
)
from pool._private.device_memory import DeviceMemory
from pool._private.loads import BackgroundLoads
from pool._private.queue import ModelQueue, Pending, QueueState, fail
from pool._private.reporting import worker_counters, worker_status
from pool._private.residency import Residency, SwapIn
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory, ModelLoadError, ModelNotLoaded
from pool.types import DeviceCounters, ModelKey, RoutingStats, Rows, WorkResult

__all__ = ["INLINE_AFTER_RUNS", "DeviceWorker"]


class DeviceWorker:
    """Runs the models registered on one device. All methods are called on one event loop.

    ``scheduler`` names a policy in ``policies.scheduling`` (``priority`` or ``fifo``) or is a
    policy object; ``eviction`` is an ``EvictionPolicy`` (default priority-aware LRU);
    ``memory`` overrides the device memory (tests). Queues are bounded by ``max_queue`` requests
    per device; beyond it ``infer`` raises ``asyncio.QueueFull``. A model's per-row cost estimate
    that no run has refreshed for ``estimate_ttl_s`` no longer refuses work: the next request runs
    and its measurement replaces the estimate (so one hang costs at most one slow run per TTL,
    instead of the model being refused forever once its estimate exceeds its callers' budgets).
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
    ) -> None:
        if estimate_ttl_s <= 0:
            raise ValueError(f"estimate_ttl_s must be > 0, got {estimate_ttl_s}")
        self.device = device
        self._estimate_ttl_s = estimate_ttl_s
        self._clock = clock
        self.policy = get_scheduling_policy(scheduler) if isinstance(scheduler, str) else scheduler
        self._executor = device_thread(device)
        self.tiers = Residency(device, memory=memory, eviction=eviction, clock=clock,
                               executor=self._executor)
        self.chunk_runner = ChunkRunner(device, self.tiers, self._executor)
        self.queues = QueueState(max_queue, device.label)
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task | None = None
        self._closed = False
        self._current: str | None = None
        self.pace = Pace()  # how far behind its estimates this device runs (triage, stats)
        self._running: frozenset[int] = frozenset()  # ids in the chunk now on the device
        self._loads = BackgroundLoads(self.tiers, clock, self._loaded)  # disk loads off the loop
        self._slice_start = 0.0
        self._last: str | None = None
        self.preemptions = 0
        self.preempted_by = [0, 0, 0, 0]  # preemptions by the class that took the device
        self.incarnation = uuid.uuid4().hex[:12]  # tells a restarted replica's counters apart
        self.expired = 0
        self.chunks = 0
        self.inline_chunks = 0

    # -- models -----------------------------------------------------------------------------
    async def add_model(
        self, key: ModelKey, config: ModelConfig, loader: Callable[[], nn.Module]
    ) -> None:
        """Load into the host tier (off the event loop), validate with a warm-up forward pass.

        The model becomes resident on the device on first use (or at once if it fits without
        evicting anything). Raises ModelLoadError for a model that fails to load or run.
        """
        try:
            packed, load_s = await self.tiers.load(loader)
            await self.chunk_runner.in_device_thread(warm_up, packed.module, config)
        except ModelLoadError:
            raise
        except Exception as e:  # a broken model marks that model, not the process
            raise ModelLoadError(str(key), f"warm-up failed: {type(e).__name__}: {e}") from e
        if key in self.queues.models:
            await self.remove_model(key)
        name = str(key)
        reload = warmed_loader(loader, config, threads=self.chunk_runner.threads)
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
        self.tiers.forget(str(key))
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
        if key not in self.queues.models:
            raise ModelNotLoaded(f"model {key} is not loaded on {self.device.label}")
        if not inputs:
            raise ValueError("inputs must name at least one tensor")
        fut = asyncio.get_running_loop().create_future()
        now = self._clock()
        self.queues.submit(key, inputs, priority, deadline, now, fut)
        self._ensure_loop()
        if self._running and not self.policy.keeps_on_arrival(
                now=now, deadline=deadline, backlog_s=self._backlog_s(), pace=self.pace.factor):
            # The loop is inside a chunk: triage now rather than after it, so a request that
            # cannot make it is refused on arrival even behind a long chunk or swap-in. (One
            # that makes it behind all the queued work is kept by any ranking: no triage.)
            self._triage_now()
        self._wakeup.set()
        return await fut

    def _triage_now(self) -> None:
        expired, _ = self.policy.triage(self.snapshot())
        self.expired += self.queues.expire(tuple(i for i in expired if i not in self._running))

    def routing_stats(self) -> RoutingStats:
        """Load view for the request router and spill: the same estimate the scheduler uses."""
        snap = self.snapshot()
        models = snap.models
        depth = [0, 0, 0, 0]
        for m in models:
            for r in m.requests:
                depth[r.priority] += 1
        mem = self.tiers.memory
        return RoutingStats(
            device=self.device.label,
            resident=frozenset(mem.resident_keys()),
            queue_delay_s=queue_delay_by_class(models, pace=snap.pace),
            queue_depth=(depth[0], depth[1], depth[2], depth[3]),
            memory_free_bytes=mem.free_bytes,
            memory_total_bytes=mem.capacity_bytes,
            hosted=frozenset(self.tiers.host_keys()),
            replica=self.incarnation,
            swaps=self.tiers.stats.swaps,
            row_cost_s={m.key: m.row_cost_s for m in models if m.row_cost_s > 0},
        )

    def counters(self) -> DeviceCounters:
        """Cumulative counters and current gauges (``DeviceCounters``) for metrics and alerts."""
        return worker_counters(self)

    def status(self) -> dict:
        """Resident and host-tier models, queue depths, swaps, preemptions, memory."""
        return worker_status(self)

    async def close(self) -> None:
        self._closed = True
        self._loads.cancel()
        if self._loop_task:  # the loop also ends on _closed, should a cancel be swallowed
            self._loop_task.cancel()
            # gather, not try/except CancelledError: a cancel of close() itself propagates
            await asyncio.gather(self._loop_task, return_exceptions=True)
        self.queues.fail_all(ModelNotLoaded("worker closed"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- loop: schedule -> execute -> update ---------------------------------------------------
    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _stale(self, entry: ModelQueue) -> bool:
        return (entry.measured_at is not None
                and self._clock() - entry.measured_at > self._estimate_ttl_s)

    def _backlog_s(self) -> float:
        return self.queues.backlog_s(resident=self.tiers.is_resident,
                                     swap_cost_s=self._loads.swap_cost_s, stale=self._stale)

    def snapshot(self) -> SchedulerSnapshot:
        """The queues as the scheduling policy sees them (see ``QueueState.model_views``)."""
        models = self.queues.model_views(resident=self.tiers.is_resident,
                                         swap_cost_s=self._loads.swap_cost_s, stale=self._stale,
                                         loading=self._loading)
        return SchedulerSnapshot(
            self._clock(), models, self._current, self._slice_start,
            self.device.slice_ms / 1e3, self.device.chunk_size, self.pace.factor,
        )

    def schedule(self) -> ScheduleDecision:
        """Step 1: the policy's decision over a fresh snapshot."""
        return self.policy.decide(self.snapshot())

    async def _run(self) -> None:
        while not self._closed:
            started = self._clock()
            decision = self.schedule()
            self.expired += self.queues.expire(decision.expired)
            if decision.model is None:
                await self._idle(decision.wait_until)
                continue
            inline_before, chunks_before = self.inline_chunks, self.chunks
            try:
                await self.execute(decision)
            except Exception as e:  # noqa: BLE001 - contained: fail this chunk's requests, keep serving
                for p in self.queues.chosen(decision):
                    fail(p, e)
            if self.inline_chunks != inline_before:
                await asyncio.sleep(0)  # an inline chunk never yielded: let arrivals in
            if self.chunks != chunks_before:
                # Everything from this decision to the next, against what the decision
                # estimated: the thread hop and loop delays the estimates leave out.
                self.pace = self.pace.observe(wall_s=self._clock() - started,
                                              work_s=decision.work_s)

    async def _idle(self, wait_until: float | None) -> None:
        self._wakeup.clear()
        timeout = None if wait_until is None else max(0.0, wait_until - self._clock())
        try:  # not wait_for: on 3.11 it can swallow a cancel (the loop would outlive stop)
            async with asyncio.timeout(timeout):
                await self._wakeup.wait()
        except TimeoutError:
            pass

    async def execute(self, d: ScheduleDecision) -> None:
        """Step 2: make the decision's model resident and run one chunk, then step 3."""
        assert d.model is not None
        key = self.queues.by_name[d.model]
        entry = self.queues.models[key]
        if self._last is not None and self._last != d.model and self.queues.has_started(
                self._last):
            self.preemptions += 1
            self.preempted_by[d.priority] += 1
        self._last = d.model
        swap: SwapIn | None = None
        try:
            if not self.tiers.can_reserve(d.model):
                # On disk (the host tier dropped it), or a swap of it already in flight: load it
                # off the loop and serve resident models meanwhile; the policy sees it loading
                # until then. Awaiting the load here held the whole device for a disk read.
                self._loads.start(d.model)
                return
            # From the host tier: evict and reserve now, copy in the chunk's device call.
            swap = self.tiers.reserve(d.model, d.priority, self.queues.queued_classes())
        except DeviceOutOfMemory as e:
            for p in entry.queue:
                fail(p, e)
            entry.queue.clear()
            return
        if d.model != self._current:
            self._current = d.model
            self._slice_start = self._clock()
        parts = (self.queues.take_rows(self.queues.chosen(d), d.chunk_rows)
                 if key in self.queues.models else [])
        if not parts:  # removed while swapping in, or every chosen request was cancelled
            if swap is not None:
                self.tiers.abort(swap)
            return
        start = self._clock()
        for p, _, _ in parts:
            if p.first_start is None:
                p.first_start = start
        self._running = frozenset(p.id for p, _, _ in parts)
        try:
            out = await self.chunk_runner.run(d.model, entry, parts, d.priority, swap, 0.0)
        finally:
            self._running = frozenset()
        self.update_from_output(entry, parts, out)

    def _loading(self, name: str) -> bool:
        # Ours from the moment the task is created (before it first runs), or a swap-in that
        # another caller (add_model) has in flight.
        return name in self._loads or self.tiers.loading(name)

    def _loaded(self, name: str, error: BaseException | None) -> None:
        entry = self.queues.entry(name)
        if error is not None and entry is not None:
            for p in entry.queue:
                fail(p, error)
        self._wakeup.set()

    def update_from_output(self, entry: ModelQueue, parts: list[tuple[Pending, int, int]],
                           out: ChunkOutput) -> None:
        """Step 3: give each request its rows, answer finished ones, refresh the estimates."""
        self.chunks += 1
        if out.inline:
            self.inline_chunks += 1
        else:
            entry.thread_runs += 1
        stall = self.chunk_runner.stall(out)
        if stall is not None:
            entry.inline_refused = stall
        # The cost per row sizes chunks in time: measured in the device call, so the thread hop
        # and event-loop delays (which vary with load, not with rows) do not shrink chunks. A
        # stale estimate (a long-idle model, or one slowed by a past stall) is replaced whole.
        row_s = out.device_s / max(out.rows, 1)
        entry.ewma_row_s = ewma(None if self._stale(entry) else entry.ewma_row_s, row_s)
        entry.measured_at = self._clock()
        offset = 0
        # numpy callers (the pool's host) get numpy views: one conversion per chunk, and a
        # numpy slice costs a tenth of a tensor slice
        arrays = ({k: v.numpy() for k, v in out.outputs.items()}
                  if any(p.as_numpy for p, _, _ in parts) else out.outputs)
        for p, _, n in parts:
            src = arrays if p.as_numpy else out.outputs
            p.parts.append({k: v[offset: offset + n] for k, v in src.items()})
            offset += n
            p.done += n
            p.compute_s += out.compute_s
            p.swap_s += out.swap_s
            p.batch = max(p.batch, out.rows)
            if p.done >= p.rows:
                self._finish(p)
        entry.queue = [p for p in entry.queue if p.done < p.rows and not p.future.done()]

    def _finish(self, p: Pending) -> None:
        if p.future.done():
            return
        outs = {k: join_rows([part[k] for part in p.parts]) for k in p.parts[0]}
        queue_ms = ((p.first_start or p.arrival) - p.arrival) * 1e3
        p.future.set_result(WorkResult(outs, queue_ms, p.compute_s * 1e3, p.swap_s * 1e3,
                                       p.batch, self.device.label))
