"""Public pool types: a model's key on a device, one request's result, a replica's load view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # the pool's public types stay importable without torch (load generator)
    import numpy as np
    import torch

__all__ = ["DeviceCounters", "ModelKey", "Rows", "RoutingStats", "WorkResult"]

# Batch-first CPU rows of one tensor: a torch tensor, or a numpy array. The worker answers in
# the kind it was given; the host hands it numpy, so a chunk converts once, not per request.
Rows: TypeAlias = "torch.Tensor | np.ndarray"


@dataclass(frozen=True, slots=True)
class ModelKey:
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class WorkResult:
    """Outputs (CPU rows, this request's only, of the inputs' kind) and where the time went."""

    outputs: dict[str, Rows]
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
    hosted: frozenset[str] = frozenset()  # models in the host tier (cheap swap-in)
    replica: str = ""  # this worker's incarnation (a restarted replica reports a new one)
    swaps: int = 0  # host -> device swap-ins since the worker started (cumulative)
    # Measured device seconds per row, by model key (models measured on this replica only):
    # the compute estimate of the placement policy (policies.placement).
    row_cost_s: Mapping[str, float] = field(default_factory=dict)
    # Wall-clock seconds (time.time()) when the replica published these stats (0: unknown), so
    # a reader on another process or node can tell a stale report from a fresh one.
    published_at: float = 0.0

    def to_dict(self) -> dict:
        """Plain form for Ray Serve's ``record_routing_stats`` (read by the request router)."""
        return {
            "device": self.device,
            "resident": sorted(self.resident),
            "hosted": sorted(self.hosted),
            "queue_delay_s": list(self.queue_delay_s),
            "queue_depth": list(self.queue_depth),
            "memory_free_bytes": self.memory_free_bytes,
            "memory_total_bytes": self.memory_total_bytes,
            "replica": self.replica,
            "swaps": self.swaps,
            "row_cost_s": dict(self.row_cost_s),
            "published_at": self.published_at,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> RoutingStats:
        """The inverse of :meth:`to_dict` (what Ray's request router holds per replica)."""
        return cls(
            device=str(d.get("device", "")),
            resident=frozenset(d.get("resident", ())),
            queue_delay_s=_four(d["queue_delay_s"], float),
            queue_depth=_four(d.get("queue_depth", (0, 0, 0, 0)), int),
            memory_free_bytes=int(d.get("memory_free_bytes", 0)),
            memory_total_bytes=int(d.get("memory_total_bytes", 0)),
            hosted=frozenset(d.get("hosted", ())),
            replica=str(d.get("replica", "")),
            swaps=int(d.get("swaps", 0)),
            row_cost_s={str(k): float(v) for k, v in (d.get("row_cost_s") or {}).items()},
            published_at=float(d.get("published_at", 0.0)),
        )


def _four(xs, kind):
    a, b, c, d = (kind(x) for x in xs)
    return (a, b, c, d)


@dataclass(frozen=True, slots=True)
class DeviceCounters:
    """One replica's device counters (cumulative since its worker started) and gauges.

    What the ingress exports as Prometheus series per pool replica and feeds to the alert rules
    (``swaps_in`` to swap thrashing; a new ``replica`` incarnation to replica restarts).
    Per-class tuples are indexed by ``Priority`` value (realtime, interactive, batch, background).
    """

    device: str
    replica: str  # the worker's incarnation: a restarted replica reports a new one
    swaps_in: int
    swaps_out: int
    swap_bytes: int  # bytes copied host -> device
    swap_seconds: float
    evictions: int
    preemptions: tuple[int, int, int, int]  # by the class that preempted
    queue_depth: tuple[int, int, int, int]
    memory_used_bytes: int
    memory_free_bytes: int
    memory_total_bytes: int
    host_used_bytes: int
    resident: tuple[tuple[str, int], ...] = ()  # (model@version, bytes) on the device
    hosted: tuple[str, ...] = ()  # models in the host tier
    slot: int = 0  # the replica's rank in its deployment (a replacement takes the same rank)
    batches: int = 0  # batches the device completed
    compute_seconds: float = 0.0  # their forward passes' device time (CUDA events on a GPU)
