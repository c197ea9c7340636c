"""The per-device worker: queues requests by priority, batches per model, runs them.

This is the first slice: one scheduling loop per device, priority + earliest-deadline-first
choice of the next model, dynamic batching (max_batch_size, batch_wait_ms), warm-up at load,
expiry of requests whose deadline passed. Memory-aware residency, swapping, chunked preemption
and time slices build on the same interface.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from policies.priority import Priority
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.errors import ModelLoadError, ModelNotLoaded, RequestExpired

__all__ = ["ModelKey", "WorkResult", "RoutingStats", "DeviceWorker"]


@dataclass(frozen=True, slots=True)
class ModelKey:
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True)
class WorkResult:
    """Outputs (CPU tensors, this request's rows only) and where the time went."""

    outputs: dict[str, torch.Tensor]
    queue_ms: float
    compute_ms: float
    swap_ms: float
    batch_size: int
    device: str


@dataclass(frozen=True, slots=True)
class RoutingStats:
    """What a replica publishes for request routing and spill decisions."""

    device: str
    resident: frozenset[str]
    queue_delay_s: tuple[float, float, float, float]  # estimated wait per Priority value
    queue_depth: tuple[int, int, int, int]
    memory_free_bytes: int
    memory_total_bytes: int


@dataclass(slots=True)
class _Pending:
    key: ModelKey
    inputs: dict[str, torch.Tensor]
    rows: int
    priority: Priority
    deadline: float | None
    arrival: float
    future: asyncio.Future = field(repr=False)


@dataclass(slots=True)
class _Entry:
    config: ModelConfig
    module: nn.Module
    queue: list[_Pending] = field(default_factory=list)
    ewma_row_s: float = 0.001


class DeviceWorker:
    """Runs the models registered on one device. All methods are called on one event loop."""

    def __init__(
        self, device: DeviceSpec, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.device = device
        self._clock = clock
        self._models: dict[ModelKey, _Entry] = {}
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task | None = None
        self._closed = False

    # -- models -----------------------------------------------------------------------------
    async def add_model(
        self, key: ModelKey, config: ModelConfig, loader: Callable[[], nn.Module]
    ) -> None:
        """Load (off the event loop), move to the device, warm up; raise ModelLoadError."""

        def _load() -> nn.Module:
            module = loader().eval().to(self.device.torch_device)
            with torch.inference_mode():
                module(*_dummy_inputs(config, self.device.torch_device))
            return module

        try:
            module = await asyncio.to_thread(_load)
        except ModelLoadError:
            raise
        except Exception as e:  # a broken model marks that model, not the process
            raise ModelLoadError(str(key), f"warm-up failed: {type(e).__name__}: {e}") from e
        self._models[key] = _Entry(config=config, module=module)

    async def remove_model(self, key: ModelKey) -> None:
        entry = self._models.pop(key, None)
        if entry:
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
        entry = self._models.get(key)
        if entry is None:
            raise ModelNotLoaded(f"model {key} is not loaded on {self.device.label}")
        self._ensure_loop()
        rows = next(iter(inputs.values())).shape[0]
        fut = asyncio.get_running_loop().create_future()
        entry.queue.append(_Pending(key, inputs, rows, priority, deadline, self._clock(), fut))
        self._wakeup.set()
        return await fut

    def routing_stats(self) -> RoutingStats:
        depth = [0, 0, 0, 0]
        delay = [0.0, 0.0, 0.0, 0.0]
        for entry in self._models.values():
            for p in entry.queue:
                depth[p.priority] += 1
                work = p.rows * entry.ewma_row_s
                for cls in range(p.priority, 4):  # work ahead of or equal to each class
                    delay[cls] += work
        return RoutingStats(
            device=self.device.label,
            resident=frozenset(str(k) for k in self._models),
            queue_delay_s=tuple(delay),  # type: ignore[arg-type]
            queue_depth=tuple(depth),  # type: ignore[arg-type]
            memory_free_bytes=0,
            memory_total_bytes=self.device.memory_budget_bytes or 0,
        )

    def status(self) -> dict:
        stats = self.routing_stats()
        return {
            "device": self.device.label,
            "resident": sorted(stats.resident),
            "queue_depth": {p.label: stats.queue_depth[p] for p in Priority},
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

    # -- loop -------------------------------------------------------------------------------
    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _expire(self, now: float) -> None:
        for entry in self._models.values():
            keep = []
            for p in entry.queue:
                if p.future.done():
                    continue
                if p.deadline is not None and now >= p.deadline:
                    p.future.set_exception(RequestExpired(f"{p.key}: deadline passed in queue"))
                else:
                    keep.append(p)
            entry.queue = keep

    def _pick(self) -> ModelKey | None:
        best: tuple | None = None
        for key, entry in self._models.items():
            for p in entry.queue:
                rank = (p.priority, p.deadline if p.deadline is not None else float("inf"), p.arrival)
                if best is None or rank < best[0]:
                    best = (rank, key)
        return best[1] if best else None

    async def _run(self) -> None:
        while not self._closed:
            self._expire(self._clock())
            key = self._pick()
            if key is None:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            entry = self._models[key]
            wait_s = entry.config.batch_wait_ms / 1000.0
            if wait_s > 0 and sum(p.rows for p in entry.queue) < entry.config.max_batch_size:
                await asyncio.sleep(wait_s)
                self._expire(self._clock())
                if key not in self._models or not self._models[key].queue:
                    continue
            batch, rows = [], 0
            entry.queue.sort(key=lambda p: (p.priority, p.deadline or float("inf"), p.arrival))
            while entry.queue and rows + entry.queue[0].rows <= entry.config.max_batch_size:
                p = entry.queue.pop(0)
                batch.append(p)
                rows += p.rows
            if not batch:  # one oversized request (validated upstream; guard anyway)
                batch.append(entry.queue.pop(0))
            await self._execute(entry, batch)

    async def _execute(self, entry: _Entry, batch: list[_Pending]) -> None:
        start = self._clock()
        dev = self.device.torch_device
        names = [t.name for t in entry.config.inputs]
        try:
            args = [torch.cat([p.inputs[n] for p in batch]).to(dev) for n in names]

            def _forward():
                with torch.inference_mode():
                    return entry.module(*args)

            raw = await asyncio.to_thread(_forward)
            outputs = _name_outputs(entry.config, raw)
        except Exception as e:
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(e)
            return
        end = self._clock()
        rows = sum(p.rows for p in batch)
        entry.ewma_row_s = 0.8 * entry.ewma_row_s + 0.2 * ((end - start) / max(rows, 1))
        offset = 0
        for p in batch:
            part = {k: v[offset : offset + p.rows].cpu() for k, v in outputs.items()}
            offset += p.rows
            if not p.future.done():
                p.future.set_result(
                    WorkResult(part, (start - p.arrival) * 1e3, (end - start) * 1e3, 0.0, rows,
                               self.device.label)
                )


def _dummy_inputs(config: ModelConfig, device: str) -> list[torch.Tensor]:
    return [
        torch.zeros((1, *[d if d > 0 else 1 for d in spec.shape]), dtype=getattr(torch, spec.numpy_dtype), device=device)
        for spec in config.inputs
    ]


def _name_outputs(config: ModelConfig, raw) -> dict[str, torch.Tensor]:
    names = [t.name for t in config.outputs]
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if isinstance(raw, dict):
        return {n: raw[n] for n in names}
    if len(raw) != len(names):
        raise ValueError(f"model returned {len(raw)} outputs, config declares {names}")
    return dict(zip(names, raw))
