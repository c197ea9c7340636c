"""Tiers of one device: disk -> host (pinned on CUDA) -> device, and the swaps between them.

Swap-in copies the host buffer into a device region and re-points the module at it; nothing is
re-read from disk while the host tier holds the model. On CUDA the copy is non-blocking on a
separate copy stream and ends with an event that every compute stream waits on, so the forward
pass queued after it is ordered on the device and the host does not wait (``ensure`` alone waits
for the event: its contract is "copied when it returns"). The pipelined variant
(:meth:`Residency.copy_pipelined`) copies layer group by layer group so the first layers can
run while later ones still copy. Swap-out re-points the module at its host buffer
and frees the region; nothing is copied back (inference weights do not change). When the host
tier drops a model, its next swap-in calls the loader again (a disk load).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from policies.eviction import EvictionPolicy
from policies.priority import Priority
from pool._private.device_memory import ArenaMemory, CudaMemory, DeviceMemory, HostMemory
from pool._private.events import EventPool
from pool._private.host_tier import HostTier
from pool._private.memory import MemoryManager
from pool._private.pipelined import PipelinedCopy, plan_groups
from pool._private.streams import class_streams
from pool._private.weights import PackedModel, bind, pack
from pool.device import DeviceSpec

__all__ = ["INLINE_COPY_S", "Residency", "SwapIn", "SwapStats", "memory_for"]

# A swap whose copy is estimated (bytes over the measured bandwidth) to take at most this long
# is copied (CPU) or waited for (CUDA: its event) on the caller's thread by ``ensure``: a hop
# to another thread and back costs ~0.1 ms and more under load, more than a small copy.
INLINE_COPY_S = 1e-3


def memory_for(device: DeviceSpec) -> DeviceMemory:
    """The device memory a spec describes (arena on a CPU budget, host without one)."""
    if device.kind == "cuda":
        return CudaMemory(device.torch_device, device.memory_budget_bytes)
    if device.memory_budget_bytes is None:
        return HostMemory()
    return ArenaMemory(device.memory_budget_bytes)


@dataclass(slots=True)
class SwapStats:
    swaps: int = 0
    swap_bytes: int = 0
    swap_s: float = 0.0
    swap_outs: int = 0
    disk_loads: int = 0
    disk_load_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SwapIn:
    """A swap-in whose device region is reserved and whose copy is still to run.

    Made by :meth:`Residency.reserve` on the event loop; :meth:`Residency.copy` runs in the
    device thread (the worker runs it in the same call as the forward pass, so a swapped-in
    request costs one thread hop, not two); :meth:`Residency.swapped` or :meth:`Residency.abort`
    closes it on the loop. The model stays pinned in between.
    """

    key: str
    packed: PackedModel
    dst: torch.Tensor | None  # None: no device copy (host memory is the device)
    reserved_s: float  # seconds spent choosing victims and reserving the region
    # CUDA: (begin, done) events of the enqueued copy; its device time is read from them.
    events: list = field(default_factory=list, compare=False)
    pooled: bool = True  # the events came from the residency's pool (not a pipelined copy's)


@dataclass(slots=True)
class _Tiered:
    loader: Callable[[], nn.Module]
    priority: Priority
    packed: PackedModel | None = None  # None: on disk only
    nbytes: int = 0
    load_s: float = 0.0
    extra: dict = field(default_factory=dict)


class Residency:
    """Owns the tiers of one device's models; all methods run on the worker's event loop."""

    def __init__(
        self,
        device: DeviceSpec,
        *,
        memory: DeviceMemory | None = None,
        eviction: EvictionPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.device = device
        self.clock = clock  # the worker's: request deadlines and recency are read on it
        self._cuda = device.kind == "cuda"
        self.memory = MemoryManager(
            memory or memory_for(device), reserve_bytes=device.reserve_bytes, policy=eviction,
            clock=clock,
        )
        self.host = HostTier(device.host_budget_bytes)
        self.stats = SwapStats()
        self._models: dict[str, _Tiered] = {}
        self._copy_stream = torch.cuda.Stream(device.torch_device) if self._cuda else None
        self._events = EventPool(device.torch_device if self._cuda else None)
        # The worker runs chunks on these; each swap-in's copy event is waited on by all of them.
        self.compute_streams = class_streams(device.torch_device) if self._cuda else None
        self._bandwidth = 2e9  # bytes/s, refined by measured swaps (EWMA)
        self._inflight: dict[str, asyncio.Future] = {}

    # -- registration -----------------------------------------------------------------------
    def register(self, key: str, loader: Callable[[], nn.Module], priority: Priority,
                 packed: PackedModel, load_s: float) -> None:
        self._models[key] = _Tiered(loader, priority, packed, packed.nbytes, load_s)
        self._host_add(key)

    def forget(self, key: str) -> None:
        if self.memory.is_resident(key):
            self.memory.release(key)
        self.host.remove(key)
        self._models.pop(key, None)

    def module(self, key: str) -> nn.Module:
        packed = self._models[key].packed
        assert packed is not None, f"{key} is not loaded"
        return packed.module

    def nbytes(self, key: str) -> int:
        return self._models[key].nbytes

    def is_resident(self, key: str) -> bool:
        """Resident and usable (not still being copied in)."""
        return self.memory.is_resident(key) and key not in self._inflight

    def host_keys(self) -> list[str]:
        return self.host.keys()

    def swap_cost_s(self, key: str) -> float:
        """Estimated time to make ``key`` resident (0 when it is)."""
        if self.memory.is_resident(key):
            return 0.0
        m = self._models[key]
        cost = m.nbytes / self._bandwidth
        return cost if key in self.host else cost + m.load_s

    # -- swaps ------------------------------------------------------------------------------
    async def load(self, loader: Callable[[], nn.Module]) -> tuple[PackedModel, float]:
        """Disk -> host: call the loader off the loop and pack the weights (pinned on CUDA)."""

        def _load() -> PackedModel:
            return pack(loader().eval(), pin=self._cuda)

        start = time.perf_counter()
        packed = await asyncio.to_thread(_load)
        return packed, time.perf_counter() - start

    async def ensure(self, key: str, priority: Priority, queued: Mapping[str, Priority]) -> float:
        """Make ``key`` resident; returns seconds spent (0 if it already was). Copied when it
        returns.

        The one swap path: :meth:`reserve` (eviction, region), :meth:`copy`, :meth:`swapped`,
        as the worker's launches use it. A copy estimated at up to ``INLINE_COPY_S`` runs (CPU)
        or is waited for (CUDA: its event) on the calling thread, with no hop: it costs less
        than a hop would. A longer one runs or is waited for off the loop. A model the host
        tier dropped is loaded from disk first. Raises DeviceOutOfMemory when it cannot be made
        to fit.
        """
        inflight = self._inflight.get(key)
        if inflight is not None:  # another caller is swapping it in: share that swap
            await asyncio.shield(inflight)
            return 0.0
        if self.memory.is_resident(key):
            self.memory.touch(key)
            self.host.touch(key)
            return 0.0
        m = self._models[key]
        if m.packed is not None and m.nbytes / self._bandwidth <= INLINE_COPY_S:
            start = time.perf_counter()
            swap = self._reserve(key, priority, queued)
            try:
                copy_s = self.copy(swap)
                if swap.events:
                    swap.events[1].synchronize()  # a small copy: microseconds, less than a hop
            except BaseException:
                self.abort(swap)
                raise
            self.swapped(swap, copy_s)
            return time.perf_counter() - start
        task = asyncio.ensure_future(self._swap_in(key, priority, queued))
        self._inflight[key] = task
        task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        return await asyncio.shield(task)

    def can_reserve(self, key: str) -> bool:
        """True when ``key`` needs no await to become resident: it already is, or its host copy
        is there and no other swap of it is in flight (then :meth:`reserve` does the rest)."""
        return key not in self._inflight and (
            self.memory.is_resident(key) or self._models[key].packed is not None)

    def use_resident(self, key: str) -> bool:
        """True when ``key`` is resident and usable (:meth:`is_resident`); then it is marked
        used, as :meth:`reserve` marks it (the launch of a resident model in one step)."""
        if key in self._inflight or not self.memory.is_resident(key):
            return False
        self.memory.touch(key)
        self.host.touch(key)
        return True

    def reserve(self, key: str, priority: Priority,
                queued: Mapping[str, Priority]) -> SwapIn | None:
        """The synchronous half of a swap-in from the host tier: evict, reserve the region, pin.

        Returns None when ``key`` is already resident. Raises DeviceOutOfMemory when it cannot be
        made to fit. Only valid when :meth:`can_reserve` is true.
        """
        if self.memory.is_resident(key):
            self.memory.touch(key)
            self.host.touch(key)
            return None
        assert self.can_reserve(key), f"{key} needs a disk load or is being swapped in: ensure()"
        return self._reserve(key, priority, queued)

    def _reserve(self, key: str, priority: Priority, queued: Mapping[str, Priority]) -> SwapIn:
        m = self._models[key]
        assert m.packed is not None
        start = time.perf_counter()
        self.memory.pin(key)
        try:
            region = self.memory.admit(
                key, m.nbytes, priority=min(priority, m.priority),
                reload_cost_s=self.swap_cost_s(key), queued=queued, evict=self.swap_out,
            )
        except BaseException:
            self.memory.unpin(key)
            raise
        self.host.touch(key)
        return SwapIn(key, m.packed, region.tensor, time.perf_counter() - start)

    def copy_cost_s(self, swap: SwapIn) -> float:
        """Estimated seconds of :meth:`copy` (measured bandwidth)."""
        return 0.0 if swap.dst is None else swap.packed.nbytes / self._bandwidth

    def copy(self, swap: SwapIn) -> float:
        """Fill the reserved region and re-point the module at it; host seconds. Device thread.

        On CUDA this only enqueues the copy (compute streams wait on its event); the device time
        is read from the copy's events in :meth:`swapped`.
        """
        if swap.dst is None:
            return 0.0
        start = time.perf_counter()
        self._copy_in(swap)
        return time.perf_counter() - start

    def copy_pipelined(self, swap: SwapIn, *, first_bytes: int = 32 << 20,
                       growth: float = 2.0) -> PipelinedCopy | None:
        """Start a layer-group-pipelined copy (see :mod:`pool._private.pipelined`); None when
        there is no device copy. Run the first forward pass inside ``hooks(module)``, then
        close the swap with :meth:`swapped` (``copy_s``: the returned copy's ``synchronize()``).
        """
        if swap.dst is None:
            return None
        groups = plan_groups(swap.packed, first_bytes=first_bytes, growth=growth)
        pc = PipelinedCopy(swap.packed, swap.dst, groups, copy_stream=self._copy_stream,
                           after=self._wait_on_compute if self._cuda else None)
        pc.start()
        if pc.events:
            swap.events[:] = [pc.events[0], pc.events[-1]]
        object.__setattr__(swap, "pooled", False)  # the copy's own events, not the pool's
        return pc

    def swapped(self, swap: SwapIn, copy_s: float) -> float:
        """Record a finished swap-in and unpin; returns its seconds (reservation + copy)."""
        self.memory.unpin(swap.key)
        copy_s = self._device_copy_s(swap, copy_s)
        if swap.dst is not None and copy_s > 0:
            self._bandwidth = 0.7 * self._bandwidth + 0.3 * (swap.packed.nbytes / copy_s)
        elapsed = swap.reserved_s + copy_s
        self.stats.swaps += 1
        self.stats.swap_bytes += swap.packed.nbytes
        self.stats.swap_s += elapsed
        return elapsed

    def _device_copy_s(self, swap: SwapIn, host_s: float) -> float:
        if not swap.events:
            return host_s
        begin, done = swap.events
        done.synchronize()  # one event (already complete after the batch), not the device
        copy_s = begin.elapsed_time(done) / 1e3
        if len(swap.events) == 2 and swap.pooled:
            self._events.give((begin, done))  # complete: safe to record again
        swap.events.clear()
        return copy_s

    def abort(self, swap: SwapIn) -> None:
        """The copy did not happen (or failed): give the region back, keep the host copy."""
        self.memory.unpin(swap.key)
        if self.memory.is_resident(swap.key):
            self.swap_out(swap.key)
            self.memory.release(swap.key)

    def loading(self, key: str) -> bool:
        """A load or swap-in of ``key`` is in flight (not runnable until it finishes)."""
        return key in self._inflight

    async def prefetch(self, key: str) -> None:
        """Disk -> host tier for a model the host tier dropped, without touching the device, so
        the worker keeps running resident models meanwhile; shares a load already in flight.
        Returns at once when the host tier holds it."""
        inflight = self._inflight.get(key)
        if inflight is not None:
            await asyncio.shield(inflight)
            return
        if self._models[key].packed is not None:
            return
        task = asyncio.ensure_future(self._load_host(key))
        self._inflight[key] = task
        task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        await asyncio.shield(task)

    async def _load_host(self, key: str) -> None:
        m = self._models[key]
        self.memory.pin(key)
        try:
            packed, load_s = await self.load(m.loader)
        finally:
            self.memory.unpin(key)
        m.packed, m.load_s, m.nbytes = packed, load_s, packed.nbytes
        self.stats.disk_loads += 1
        self.stats.disk_load_s += load_s
        self._host_add(key)

    async def _swap_in(self, key: str, priority: Priority, queued: Mapping[str, Priority]) -> float:
        start = time.perf_counter()
        if self._models[key].packed is None:  # the host tier dropped it: back from disk
            await self._load_host(key)
        swap = self._reserve(key, priority, queued)
        try:
            if swap.dst is None:
                copy_s = 0.0
            elif self._cuda:  # enqueue here, wait for the event off the loop
                copy_s = self.copy(swap)
                await asyncio.to_thread(swap.events[1].synchronize)
            else:  # a large CPU copy would hold the loop: the copy itself runs off it
                copy_s = await asyncio.to_thread(self.copy, swap)
        except BaseException:
            self.abort(swap)
            raise
        self.swapped(swap, copy_s)
        return time.perf_counter() - start

    def _copy_in(self, swap: SwapIn) -> None:
        packed, dst = swap.packed, swap.dst
        assert packed.host is not None and dst is not None
        src = packed.host
        if self._copy_stream is None:
            dst[: packed.nbytes].copy_(src)
            bind(packed, dst)
            return
        begin, done = self._events.take()
        with torch.cuda.stream(self._copy_stream):
            begin.record()
            dst[: packed.nbytes].copy_(src, non_blocking=True)
            done.record()
        # The region was allocated on another stream; should the swap be aborted and the region
        # freed while the copy is in flight, this keeps the caching allocator from reusing it.
        dst.record_stream(self._copy_stream)
        self._wait_on_compute(done)
        swap.events[:] = [begin, done]
        bind(packed, dst)

    def _wait_on_compute(self, done: torch.cuda.Event) -> None:
        """Order every later kernel on the compute streams (and this thread's current stream)
        after the copy, on the device: the host does not wait."""
        assert self.compute_streams is not None
        for stream in self.compute_streams.values():
            stream.wait_event(done)
        torch.cuda.current_stream(self.device.torch_device).wait_event(done)

    def swap_out(self, key: str) -> None:
        """Device -> host (no copy back); to disk when the host tier no longer holds it."""
        m = self._models.get(key)
        self.stats.swap_outs += 1
        if m is None or m.packed is None:
            return
        if m.packed.host is not None:
            bind(m.packed, m.packed.host)
        else:
            m.packed = None  # host copy gone: the next use loads from disk

    def evict_idle(self, keep: str | None = None) -> int:
        """Evict every model not running or pinned (CUDA OOM recovery)."""
        return self.memory.evict_idle(self.swap_out, keep=keep)

    def _host_add(self, key: str) -> None:
        m = self._models[key]
        held = _pinned_bytes(m.nbytes) if self._cuda else m.nbytes
        for dropped in self.host.add(key, held, protect=self._host_protected()):
            d = self._models.get(dropped)
            if d is None or d.packed is None:
                continue
            if self.memory.is_resident(dropped) and self._host_is_device():
                continue  # its host buffer *is* its device copy
            if self.memory.is_resident(dropped):
                # device copy stays; evicting it later means a disk load
                d.packed.host = d.packed.host_views = None
            else:
                d.packed = None

    def _host_protected(self) -> list[str]:
        # A pinned model may have a copy from its host buffer pending: never drop that buffer.
        pinned = self.memory.pinned_keys()
        return [*self.memory.resident_keys(), *pinned] if self._host_is_device() else pinned

    def _host_is_device(self) -> bool:
        return isinstance(self.memory.memory, HostMemory)


def _pinned_bytes(nbytes: int) -> int:
    """Page-locked bytes a pinned buffer of ``nbytes`` holds: PyTorch's caching host allocator
    rounds each allocation up to a power of two, so the host tier counts that, not ``nbytes``."""
    return 1 << max(0, nbytes - 1).bit_length()
