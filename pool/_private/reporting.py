"""A device worker's counters and status, read from its state (kept out of the loop's module)."""

from __future__ import annotations

from typing import Any, Protocol

from policies.priority import PRIORITIES
from pool._private.queue import QueueState
from pool._private.residency import Residency
from pool.class_window import ClassWindow
from pool.device import DeviceSpec
from pool.types import DeviceCounters, RoutingStats

__all__ = ["ReportedWorker", "worker_counters", "worker_status"]


class ReportedWorker(Protocol):
    """What the reports read of a worker (``DeviceWorker`` is one; no import of it here)."""

    device: DeviceSpec
    tiers: Residency
    queues: QueueState
    classes: ClassWindow
    incarnation: str
    preemptions: int
    preempted_by: list[int]
    expired: int
    requeued: int
    chunks: int
    compute_s: float
    inline_chunks: int
    inline_waits: int

    @property
    def policy_name(self) -> str: ...

    @property
    def pace_factor(self) -> float: ...

    def routing_stats(self) -> RoutingStats: ...


def worker_counters(w: ReportedWorker) -> DeviceCounters:
    """Cumulative counters and current gauges (``DeviceCounters``) for metrics and alerts."""
    stats = w.routing_stats()
    s, mem = w.tiers.stats, w.tiers.memory
    by = w.preempted_by
    return DeviceCounters(
        device=stats.device, replica=w.incarnation, swaps_in=s.swaps,
        swaps_out=s.swap_outs, swap_bytes=s.swap_bytes, swap_seconds=s.swap_s,
        evictions=mem.evictions, preemptions=(by[0], by[1], by[2], by[3]),
        queue_depth=stats.queue_depth, memory_used_bytes=mem.used_bytes,
        memory_free_bytes=mem.free_bytes, memory_total_bytes=mem.capacity_bytes,
        host_used_bytes=w.tiers.host.used_bytes,
        batches=w.chunks, compute_seconds=w.compute_s,
        resident=tuple((k, w.tiers.nbytes(k)) for k in sorted(stats.resident)),
        hosted=tuple(sorted(stats.hosted)))


def worker_status(w: ReportedWorker) -> dict[str, Any]:
    """Resident and host-tier models, queue depths, swaps, preemptions, memory."""
    stats = w.routing_stats()
    s = w.tiers.stats
    mem = w.tiers.memory
    return {
        "device": w.device.label,
        "replica": w.incarnation,
        "scheduler": w.policy_name,
        "pace": w.pace_factor,
        "models": sorted(w.queues.by_name),
        "resident": sorted(stats.resident),
        "resident_bytes": {k: w.tiers.nbytes(k) for k in sorted(stats.resident)},
        "host_tier": sorted(stats.hosted),
        "queue_depth": {p.label: stats.queue_depth[p] for p in PRIORITIES},
        "queue_delay_s": {p.label: stats.queue_delay_s[p] for p in PRIORITIES},
        "swaps": {"count": s.swaps, "bytes": s.swap_bytes, "ms": s.swap_s * 1e3,
                  "outs": s.swap_outs, "disk_loads": s.disk_loads,
                  "disk_load_ms": s.disk_load_s * 1e3},
        "evictions": mem.evictions,
        "preemptions": w.preemptions,
        "preemptions_by": {p.label: w.preempted_by[p] for p in PRIORITIES},
        # per class, recent: requests/s, queue wait, compute and swap-in (ms), refusals
        "classes": w.classes.snapshot(),
        "expired": w.expired,
        # batches launched, then given back before they started, for more urgent work
        "requeued": w.requeued,
        "chunks": w.chunks,
        # their forward passes' device time, summed (CUDA events on a GPU; wall time on the
        # CPU device): over a window, its growth over the window's length is the busy share
        "compute_s": round(w.compute_s, 6),
        "inline_chunks": w.inline_chunks,
        # chunks that waited for the device thread's batch to run inline after it
        "inline_waits": w.inline_waits,
        "not_inline": {str(k): e.inline_refused for k, e in w.queues.models.items()
                       if e.inline_refused is not None},
        "memory": {"used_bytes": mem.used_bytes, "free_bytes": mem.free_bytes,
                   "total_bytes": mem.capacity_bytes, "reserve_bytes": mem.reserve_bytes,
                   "host_used_bytes": w.tiers.host.used_bytes,
                   "host_budget_bytes": w.tiers.host.budget_bytes},
    }
