"""A device's queues as the scheduling policies see them: immutable views, taken at one instant.

Beneath both readers: ``policies.scheduling`` decides from them and ``policies.estimates``
prices their work, so neither imports the other for the types.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.priority import Priority

__all__ = ["ModelView", "RequestView", "SchedulerSnapshot"]


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
    arrival_gap_s: float = 0.0  # typical time between this model's arrivals (EWMA)
    # Its weights are being loaded from disk into the host tier off the device loop: it cannot
    # run yet, and the load does not hold the device (other models run meanwhile).
    loading: bool = False
    # row_cost_s is a fresh measurement (False: the initial guess, or a stale one shown as it).
    measured: bool = True


@dataclass(frozen=True, slots=True)
class SchedulerSnapshot:
    """The device's queues at ``now``; ``current`` is the model whose slice began at
    ``slice_start``; ``pace`` is how far behind its estimates the device runs
    (``policies.estimates.Pace.factor``, 1: exactly at them)."""

    now: float
    models: tuple[ModelView, ...]
    current: str | None = None
    slice_start: float = 0.0
    slice_s: float = 0.05
    chunk_size: int = 16
    pace: float = 1.0
