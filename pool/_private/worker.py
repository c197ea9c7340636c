"""The per-device worker: queues, residency and the loop that executes scheduling decisions.

One asyncio loop per device. Each turn it builds an immutable snapshot of the queues, asks the
scheduling policy (``policies.scheduling``) what to do, answers expired requests, makes the chosen
model resident (swapping others out through the memory manager), runs one chunk of rows off the
event loop, and asks again. Requests may be split over several chunks; each gets its own rows
back. On CUDA, chunks run on a stream whose priority follows the request class.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn

from policies.eviction import EvictionPolicy
from policies.priority import Priority
from policies.scheduling import (
    ModelView,
    RequestView,
    ScheduleDecision,
    SchedulerSnapshot,
    SchedulingPolicy,
    get_scheduling_policy,
)
from pool._private.device_memory import DeviceMemory
from pool._private.residency import Residency, SwapIn
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory, ModelLoadError, ModelNotLoaded, RequestExpired
from pool.types import ModelKey, RoutingStats, WorkResult

__all__ = ["DeviceWorker", "ModelKey", "RoutingStats", "WorkResult"]


@dataclass(slots=True)
class _Pending:
    id: int
    key: ModelKey
    inputs: dict[str, torch.Tensor]
    rows: int
    priority: Priority
    deadline: float | None
    arrival: float
    future: asyncio.Future = field(repr=False)
    done: int = 0
    parts: list[dict[str, torch.Tensor]] = field(default_factory=list)
    compute_s: float = 0.0
    swap_s: float = 0.0
    first_start: float | None = None
    batch: int = 0


_INITIAL_ROW_S = 0.0005  # per-row cost assumed before a model's first run
INLINE_AFTER_RUNS = 3  # device-thread runs measured before a model may run inline
_INLINE_STALL = 10.0  # a chunk this many times inline_ms disqualifies the model from inline


@dataclass(slots=True)
class _Entry:
    config: ModelConfig
    queue: list[_Pending] = field(default_factory=list)
    ewma_row_s: float = _INITIAL_ROW_S
    measured_at: float | None = None  # clock time of the last measurement of ewma_row_s
    last_arrival: float | None = None
    ewma_gap_s: float = float("inf")  # inter-arrival time: does waiting for a batch pay?
    thread_runs: int = 0  # chunks measured on the device thread
    inline_ok: bool = True  # False for good once a chunk stalled (see DeviceSpec.inline_ms)

    def arrived(self, now: float) -> None:
        if self.last_arrival is not None:
            gap = now - self.last_arrival
            self.ewma_gap_s = gap if self.ewma_gap_s == float("inf") else (
                0.8 * self.ewma_gap_s + 0.2 * gap)
        self.last_arrival = now


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
        # One thread runs everything that touches the device (copies and forward passes), so the
        # device is used by one chunk at a time; torch's per-thread intra-op setting is made
        # there (a fresh thread otherwise defaults to all cores and oversubscribes them).
        threads = device.threads or torch.get_num_threads()
        self._threads = threads
        # Inline chunks (DeviceSpec.inline_ms) are a CPU-only shortcut: CUDA work stays on the
        # device thread and its streams.
        self._inline_s = device.inline_ms / 1e3 if device.kind == "cpu" else 0.0
        self.inline_chunks = 0
        self._executor = ThreadPoolExecutor(
            1, thread_name_prefix=f"timeshare-{device.label}", initializer=torch.set_num_threads,
            initargs=(threads,))
        self.tiers = Residency(device, memory=memory, eviction=eviction, clock=clock,
                               executor=self._executor)
        self._models: dict[ModelKey, _Entry] = {}
        self._by_name: dict[str, ModelKey] = {}
        self._ids = itertools.count()
        self._max_queue = max_queue
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task | None = None
        self._closed = False
        self._current: str | None = None
        self._slice_start = 0.0
        self._last: str | None = None
        self.preemptions = 0
        self.expired = 0
        self.chunks = 0
        self._streams = _class_streams(device) if device.kind == "cuda" else None

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
            await self._in_device_thread(_warm_up, packed.module, config)
        except ModelLoadError:
            raise
        except Exception as e:  # a broken model marks that model, not the process
            raise ModelLoadError(str(key), f"warm-up failed: {type(e).__name__}: {e}") from e
        if key in self._models:
            await self.remove_model(key)
        name = str(key)
        self.tiers.register(name, loader, config.priority, packed, load_s)
        self._models[key] = _Entry(config=config)
        self._by_name[name] = key
        if self.tiers.memory.free_bytes >= packed.nbytes:
            try:
                await self.tiers.ensure(name, config.priority, {})
            except DeviceOutOfMemory:
                pass  # stays in the host tier; swapped in on demand

    async def remove_model(self, key: ModelKey) -> None:
        entry = self._models.pop(key, None)
        if entry is None:
            return
        self._by_name.pop(str(key), None)
        self.tiers.forget(str(key))
        for p in entry.queue:
            if not p.future.done():
                p.future.set_exception(ModelNotLoaded(f"{key} was unloaded"))

    def has_model(self, key: ModelKey) -> bool:
        return key in self._models

    # -- requests ---------------------------------------------------------------------------
    async def infer(
        self,
        key: ModelKey,
        inputs: dict[str, torch.Tensor],
        *,
        priority: Priority = Priority.INTERACTIVE,
        deadline: float | None = None,
    ) -> WorkResult:
        """Queue ``inputs`` (batch-first CPU tensors) and wait for this request's outputs.

        Raises RequestExpired (deadline, an absolute ``clock`` time, cannot be met),
        DeviceOutOfMemory, ModelNotLoaded.
        """
        entry = self._models.get(key)
        if entry is None:
            raise ModelNotLoaded(f"model {key} is not loaded on {self.device.label}")
        if not inputs:
            raise ValueError("inputs must name at least one tensor")
        if sum(len(e.queue) for e in self._models.values()) >= self._max_queue:
            raise asyncio.QueueFull(f"{self.device.label}: {self._max_queue} requests queued")
        self._ensure_loop()
        rows = int(next(iter(inputs.values())).shape[0])
        fut = asyncio.get_running_loop().create_future()
        now = self._clock()
        p = _Pending(next(self._ids), key, inputs, rows, Priority(priority), deadline, now, fut)
        entry.arrived(now)
        entry.queue.append(p)
        self._wakeup.set()
        return await fut

    def routing_stats(self) -> RoutingStats:
        depth = [0, 0, 0, 0]
        delay = [0.0, 0.0, 0.0, 0.0]
        for key, entry in self._models.items():
            swap = self.tiers.swap_cost_s(str(key)) if entry.queue else 0.0
            charged = [False] * 4
            for p in entry.queue:
                depth[p.priority] += 1
                work = (p.rows - p.done) * entry.ewma_row_s
                for cls in range(p.priority, 4):  # work ahead of or equal to each class
                    delay[cls] += work + (0.0 if charged[cls] else swap)
                    charged[cls] = True
        mem = self.tiers.memory
        return RoutingStats(
            device=self.device.label,
            resident=frozenset(mem.resident_keys()),
            queue_delay_s=tuple(delay),  # type: ignore[arg-type]
            queue_depth=tuple(depth),  # type: ignore[arg-type]
            memory_free_bytes=mem.free_bytes,
            memory_total_bytes=mem.capacity_bytes,
            hosted=frozenset(self.tiers.host_keys()),
        )

    def status(self) -> dict:
        """Resident and host-tier models, queue depths, swaps, preemptions, memory."""
        stats = self.routing_stats()
        s = self.tiers.stats
        mem = self.tiers.memory
        return {
            "device": self.device.label,
            "scheduler": self.policy.name,
            "models": sorted(self._by_name),
            "resident": sorted(stats.resident),
            "host_tier": sorted(stats.hosted),
            "queue_depth": {p.label: stats.queue_depth[p] for p in Priority},
            "queue_delay_s": {p.label: stats.queue_delay_s[p] for p in Priority},
            "swaps": {"count": s.swaps, "bytes": s.swap_bytes, "ms": s.swap_s * 1e3,
                      "outs": s.swap_outs, "disk_loads": s.disk_loads,
                      "disk_load_ms": s.disk_load_s * 1e3},
            "evictions": mem.evictions,
            "preemptions": self.preemptions,
            "expired": self.expired,
            "chunks": self.chunks,
            "inline_chunks": self.inline_chunks,
            "memory": {"used_bytes": mem.used_bytes, "free_bytes": mem.free_bytes,
                       "total_bytes": mem.capacity_bytes, "reserve_bytes": mem.reserve_bytes,
                       "host_used_bytes": self.tiers.host.used_bytes,
                       "host_budget_bytes": self.tiers.host.budget_bytes},
        }

    async def close(self) -> None:
        self._closed = True
        if self._loop_task:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
        for entry in self._models.values():
            for p in entry.queue:
                if not p.future.done():
                    p.future.set_exception(ModelNotLoaded("worker closed"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- loop -------------------------------------------------------------------------------
    def _in_device_thread(self, fn, *args):
        return asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _stale(self, entry: _Entry) -> bool:
        return (entry.measured_at is not None
                and self._clock() - entry.measured_at > self._estimate_ttl_s)

    def snapshot(self) -> SchedulerSnapshot:
        """The queues as the scheduling policy sees them (cancelled requests left out).

        Only models with queued requests are described: an idle model cannot be chosen, and
        with many models registered (most of them idle) this keeps each decision cheap. A stale
        cost estimate is shown as the initial one, so expiry does not refuse on it.
        """
        models = []
        for key, entry in self._models.items():
            if not entry.queue:
                continue
            entry.queue = [p for p in entry.queue if not p.future.done()]
            name = str(key)
            reqs = tuple(
                RequestView(p.id, p.priority, p.deadline, p.arrival, p.rows - p.done, p.done > 0)
                for p in entry.queue
            )
            models.append(ModelView(
                name, self.tiers.is_resident(name), reqs, entry.config.max_batch_size,
                entry.config.batch_wait_ms / 1e3,
                _INITIAL_ROW_S if self._stale(entry) else entry.ewma_row_s,
                self.tiers.swap_cost_s(name) if reqs else 0.0, entry.ewma_gap_s,
            ))
        return SchedulerSnapshot(
            self._clock(), tuple(models), self._current, self._slice_start,
            self.device.slice_ms / 1e3, self.device.chunk_size,
        )

    async def _run(self) -> None:
        while not self._closed:
            snap = self.snapshot()
            decision = self.policy.decide(snap)
            self._expire(decision.expired)
            if decision.model is None:
                self._wakeup.clear()
                timeout = None if decision.wait_until is None else max(
                    0.0, decision.wait_until - self._clock())
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
                continue
            inline_before = self.inline_chunks
            try:
                await self._step(decision)
            except Exception as e:  # noqa: BLE001 - contained: fail this chunk's requests, keep serving
                for p in self._chosen(decision):
                    if not p.future.done():
                        p.future.set_exception(e)
            if self.inline_chunks != inline_before:
                await asyncio.sleep(0)  # an inline chunk never yielded: let arrivals in

    def _chosen(self, d: ScheduleDecision) -> list[_Pending]:
        entry = self._models.get(self._by_name.get(d.model or "", ModelKey("", "")))
        if entry is None:
            return []
        wanted = set(d.request_ids)
        order = {rid: i for i, rid in enumerate(d.request_ids)}
        return sorted((p for p in entry.queue if p.id in wanted), key=lambda p: order[p.id])

    def _expire(self, ids: tuple[int, ...]) -> None:
        if not ids:
            return
        wanted = set(ids)
        for entry in self._models.values():
            keep = []
            for p in entry.queue:
                if p.id in wanted:
                    if not p.future.done():
                        p.future.set_exception(
                            RequestExpired(f"{p.key}: deadline cannot be met (not run)"))
                    self.expired += 1
                else:
                    keep.append(p)
            entry.queue = keep

    async def _step(self, d: ScheduleDecision) -> None:
        assert d.model is not None
        key = self._by_name[d.model]
        entry = self._models[key]
        if self._last is not None and self._last != d.model and self._has_started(self._last):
            self.preemptions += 1
        self._last = d.model
        queued = self._queued_classes()
        swap: SwapIn | None = None
        swap_s = 0.0
        try:
            if self.tiers.can_reserve(d.model):
                # From the host tier: evict and reserve now, copy in the chunk's device call.
                swap = self.tiers.reserve(d.model, d.priority, queued)
            else:  # a disk load, or a swap of this model already in flight (add_model)
                swap_s = await self.tiers.ensure(d.model, d.priority, queued)
        except DeviceOutOfMemory as e:
            for p in entry.queue:
                if not p.future.done():
                    p.future.set_exception(e)
            entry.queue.clear()
            return
        if d.model != self._current:
            self._current = d.model
            self._slice_start = self._clock()
        parts = self._take_rows(self._chosen(d), d.chunk_rows) if key in self._models else []
        if not parts:  # removed while swapping in, or every chosen request was cancelled
            if swap is not None:
                self.tiers.abort(swap)
            return
        await self._run_chunk(d, entry, parts, swap_s, swap)

    def _has_started(self, name: str) -> bool:
        key = self._by_name.get(name)
        entry = self._models.get(key) if key else None
        return bool(entry and any(p.done > 0 and not p.future.done() for p in entry.queue))

    def _queued_classes(self) -> dict[str, Priority]:
        out = {}
        for key, entry in self._models.items():
            if entry.queue:
                out[str(key)] = min(p.priority for p in entry.queue)
        return out

    @staticmethod
    def _take_rows(chosen: list[_Pending], budget: int) -> list[tuple[_Pending, int, int]]:
        parts = []
        for p in chosen:
            if budget <= 0:
                break
            n = min(p.rows - p.done, budget)
            if n > 0:
                parts.append((p, p.done, n))
                budget -= n
        return parts

    async def _run_chunk(self, d, entry: _Entry, parts, swap_s: float,
                         swap: SwapIn | None = None) -> None:
        name = d.model
        module = self.tiers.module(name)
        dev = self.device.torch_device
        names = [t.name for t in entry.config.inputs]
        rows = sum(n for _, _, n in parts)
        args = [torch.cat([p.inputs[nm][s : s + n] for p, s, n in parts]) for nm in names]
        stream = self._streams[d.priority] if self._streams else None
        copy = partial(self.tiers.copy, swap) if swap is not None else None
        inline = stream is None and self._runs_inline(entry, rows, swap)
        start = self._clock()
        for p, _, _ in parts:
            if p.first_start is None:
                p.first_start = start
        with self.tiers.memory.running(name):
            t0 = time.perf_counter()
            try:
                if inline:
                    raw, device_s, copy_s = self._inline(_forward, module, args, dev, None, copy)
                else:
                    raw, device_s, copy_s = await self._in_device_thread(
                        _forward, module, args, dev, stream, copy)
            except torch.cuda.OutOfMemoryError:
                # Only the forward pass allocates (the copy's region was reserved beforehand), so
                # the weights are in place: record the swap, then evict and retry once.
                if swap is not None:
                    swap_s += self.tiers.swapped(swap, 0.0)
                    swap = None
                raw, device_s = await self._retry_after_oom(name, module, args, dev, stream)
                copy_s = 0.0
            except BaseException:
                if swap is not None:
                    self.tiers.abort(swap)  # the weights may be half-copied: never run them
                raise
            if swap is not None:
                swap_s += self.tiers.swapped(swap, copy_s)
            compute_s = time.perf_counter() - t0 - copy_s
        self.chunks += 1
        self.tiers.memory.touch(name)
        outputs = _name_outputs(entry.config, raw)
        # The cost per row sizes chunks in time: measured in the device thread, so the thread
        # hop and event-loop delays (which vary with load, not with rows) do not shrink chunks.
        # A stale estimate (a long-idle model, or one slowed by a past stall) is replaced whole.
        row_s = device_s / max(rows, 1)
        if inline:
            self.inline_chunks += 1
        else:
            entry.thread_runs += 1
        if self._inline_s and device_s + copy_s > _INLINE_STALL * self._inline_s:
            entry.inline_ok = False
        entry.ewma_row_s = row_s if self._stale(entry) else 0.8 * entry.ewma_row_s + 0.2 * row_s
        entry.measured_at = self._clock()
        offset = 0
        for p, _, n in parts:
            p.parts.append({k: v[offset : offset + n] for k, v in outputs.items()})
            offset += n
            p.done += n
            p.compute_s += compute_s
            p.swap_s += swap_s
            p.batch = max(p.batch, rows)
            if p.done >= p.rows:
                self._finish(p)
        entry.queue = [p for p in entry.queue if p.done < p.rows and not p.future.done()]

    def _runs_inline(self, entry: _Entry, rows: int, swap: SwapIn | None) -> bool:
        """Run this chunk on the loop thread? (see DeviceSpec.inline_ms)"""
        if not self._inline_s or not entry.inline_ok or entry.thread_runs < INLINE_AFTER_RUNS:
            return False
        estimate = rows * entry.ewma_row_s
        if swap is not None:
            estimate += self.tiers.copy_cost_s(swap)
        return estimate <= self._inline_s

    def _inline(self, fn, *args):
        """Call ``fn`` on this thread with the device's torch thread count (per OS thread in
        torch), restoring the caller's afterwards."""
        prev = torch.get_num_threads()
        if prev != self._threads:
            torch.set_num_threads(self._threads)
        try:
            return fn(*args)
        finally:
            if prev != self._threads:
                torch.set_num_threads(prev)

    async def _retry_after_oom(self, name, module, args, dev, stream) -> tuple[object, float]:
        """CUDA out of memory: evict every idle model and run the chunk once more."""
        self.tiers.evict_idle(keep=name)
        torch.cuda.empty_cache()
        try:
            raw, device_s, _ = await self._in_device_thread(_forward, module, args, dev, stream)
        except torch.cuda.OutOfMemoryError as e:
            raise DeviceOutOfMemory(f"{name}: CUDA out of memory after evicting") from e
        return raw, device_s

    def _finish(self, p: _Pending) -> None:
        if p.future.done():
            return
        outs = {k: torch.cat([part[k] for part in p.parts]) if len(p.parts) > 1 else p.parts[0][k]
                for k in p.parts[0]}
        queue_ms = ((p.first_start or p.arrival) - p.arrival) * 1e3
        p.future.set_result(WorkResult(outs, queue_ms, p.compute_s * 1e3, p.swap_s * 1e3,
                                       p.batch, self.device.label))


def _forward(module: nn.Module, args: list[torch.Tensor], dev: str, stream,
             copy: Callable[[], float] | None = None) -> tuple[object, float, float]:
    """Run one chunk, after ``copy()`` (a pending swap-in's copy) when given; returns the CPU
    outputs, the seconds the forward pass took in this thread, and the seconds of the copy."""
    copy_s = copy() if copy is not None else 0.0
    t0 = time.perf_counter()
    with torch.inference_mode():
        if stream is None:
            out = _to_cpu(module(*[a.to(dev) for a in args]))
        else:
            with torch.cuda.stream(stream):
                out = module(*[a.to(dev, non_blocking=True) for a in args])
                out = _to_cpu(out)
            stream.synchronize()
    return out, time.perf_counter() - t0, copy_s


def _to_cpu(raw):
    if isinstance(raw, torch.Tensor):
        return raw.cpu()
    if isinstance(raw, dict):
        return {k: v.cpu() for k, v in raw.items()}
    return tuple(v.cpu() for v in raw)


def _class_streams(device: DeviceSpec) -> dict[Priority, torch.cuda.Stream]:
    low, high = torch.cuda.Stream.priority_range()  # e.g. (0, -5): lower number = more urgent
    levels = {Priority.REALTIME: high, Priority.INTERACTIVE: (low + high) // 2,
              Priority.BATCH: low, Priority.BACKGROUND: low}
    return {cls: torch.cuda.Stream(device.torch_device, priority=lvl) for cls, lvl in levels.items()}


# TorchScript's profiling executor profiles a module's first passes and optimises after them
# (a 13.7 MB transformer encoder: ~250 ms, then ~200 ms, then 4 ms). The host tier keeps the
# module object, so paying them once at load keeps them off every request, swaps included.
_WARM_UP_PASSES = 2


def _warm_up(module: nn.Module, config: ModelConfig) -> None:
    args = [
        torch.zeros((1, *[d if d > 0 else 1 for d in spec.shape]),
                    dtype=getattr(torch, spec.numpy_dtype))
        for spec in config.inputs
    ]
    with torch.inference_mode():
        for _ in range(_WARM_UP_PASSES):
            _name_outputs(config, module(*args))


def _name_outputs(config: ModelConfig, raw) -> dict[str, torch.Tensor]:
    names = [t.name for t in config.outputs]
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if isinstance(raw, dict):
        return {n: raw[n] for n in names}
    if len(raw) != len(names):
        raise ValueError(f"model returned {len(raw)} outputs, config declares {names}")
    return dict(zip(names, raw))
