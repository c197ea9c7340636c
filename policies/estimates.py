"""Shared estimates: the one moving average, the device's pace and the one queue-delay model.

Pure functions. The queue-delay model is used both by the scheduler's triage (which requests can
still meet their deadline behind the work ranked before them) and by the routing stats a replica
publishes (how long a new request of each class would wait), so the two can never disagree.

Work is estimated from measured device time (the compute inside the device call), which leaves
out what a busy machine adds around it: the decision, the hop to the device thread, the event
loop getting back to the worker. :class:`Pace` is how far behind those estimates the device
actually runs, learned from every chunk (wall time per estimated second); both the triage and
the published wait scale the estimated work by it, so a device that runs behind refuses work it
cannot finish in time when it is queued, not at its deadline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from policies.device_queue import ModelView, RequestView

__all__ = [
    "EWMA_ALPHA",
    "ChunkCost",
    "MAX_PACE",
    "PACE_HORIZON_S",
    "Pace",
    "ewma",
    "queue_delay_by_class",
    "request_work_s",
]

# Weight of a new sample. 0.2 follows a change within ~5 samples yet a single outlier moves the
# estimate by only a fifth of its excess.
EWMA_ALPHA = 0.2


def ewma(prev: float | None, sample: float, *, alpha: float = EWMA_ALPHA) -> float:
    """Exponentially weighted moving average; the first sample (``prev`` None or infinite) is
    taken as is.

    >>> ewma(None, 2.0), round(ewma(1.0, 2.0), 9)
    (2.0, 1.2)
    """
    if prev is None or prev == math.inf:
        return sample
    return (1.0 - alpha) * prev + alpha * sample


@dataclass(frozen=True, slots=True)
class ChunkCost:
    """A chunk's cost as a fixed part plus a part per row, fitted by exponentially weighted
    least squares over the measured chunks (each weighs ``EWMA_ALPHA`` against the past).

    A small model's forward on a busy event loop is mostly a fixed cost: digits-small took
    130-300 µs of CPU a chunk on the ingress's loop whatever its rows, 12-25 µs alone with its
    caches hot (docs/PERFORMANCE.md, "The thread fed itself"). A cost per row taken from small
    chunks then over-counts large ones several times over. Until chunks of two sizes have been
    seen, a chunk is taken to cost what the measured size did, plus its share per extra row.

    >>> c = ChunkCost().observe(1, 150e-6).observe(9, 230e-6)
    >>> round(c.predict(17) * 1e6)
    310
    >>> round(ChunkCost().observe(4, 200e-6).predict(8) * 1e6)  # one size seen: per row above
    400
    >>> round(ChunkCost().observe(4, 200e-6).predict(1) * 1e6)  # and its whole cost below
    200
    """

    x: float = 0.0  # weighted mean rows
    y: float = 0.0  # weighted mean cost (s)
    xx: float = 0.0  # weighted mean of rows squared
    xy: float = 0.0  # weighted mean of rows times cost
    n: int = 0  # chunks observed

    def observe(self, rows: int, cost_s: float, *, alpha: float = EWMA_ALPHA) -> ChunkCost:
        if self.n == 0:
            return ChunkCost(rows, cost_s, rows * rows, rows * cost_s, 1)
        k = 1.0 - alpha
        return ChunkCost(k * self.x + alpha * rows, k * self.y + alpha * cost_s,
                         k * self.xx + alpha * rows * rows, k * self.xy + alpha * rows * cost_s,
                         self.n + 1)

    def predict(self, rows: int) -> float:
        """The estimated cost of a chunk of ``rows`` rows (0 before any measurement)."""
        if self.n == 0:
            return 0.0
        var = self.xx - self.x * self.x
        if var < 0.25:  # (about) one size seen: no slope to fit
            return self.y * max(1.0, rows / self.x) if self.x > 0 else self.y
        per_row = max(0.0, (self.xy - self.x * self.y) / var)
        fixed = self.y - per_row * self.x
        if fixed < 0.0:  # costs grow faster than rows: through the origin, never below zero
            return rows * self.y / self.x
        return fixed + per_row * rows

    def rows_within(self, budget_s: float, most: int) -> int:
        """The most rows (at least 1, at most ``most``) a chunk may have to cost at most
        ``budget_s`` by :meth:`predict`.

        >>> ChunkCost().observe(1, 150e-6).observe(9, 230e-6).rows_within(1e-3, 64)
        64
        >>> ChunkCost().observe(4, 200e-6).rows_within(1e-3, 64)
        20
        """
        if self.predict(most) <= budget_s:
            return most
        lo, hi = 1, most  # predict grows with rows: the last that fits, by bisection
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.predict(mid) <= budget_s:
                lo = mid
            else:
                hi = mid - 1
        return lo


# The pace is the device's over about its last second of busy time: the horizon a request's
# wait spans (deadlines of a few hundred ms) and more, so a passing stall (a disk load's
# thread taking the CPU for 100 ms) does not refuse every arrival for the whole of the next
# second, while a lasting slowdown takes over within it.
PACE_HORIZON_S = 1.0
# The pace never claims more than this: beyond it the estimates are not describing the device
# (a stall, a debugger), and refusing everything for it would turn one hiccup into an outage.
MAX_PACE = 10.0


# Not frozen: the worker builds one per completed batch (replacing its pace whole; nothing
# changes a Pace once built), and a frozen dataclass's constructor costs twice as much.
@dataclass(slots=True)
class Pace:
    """How far behind its work estimates a device runs: the wall time of its chunks (decision
    to next decision) and their estimated work, each summed with older chunks decaying by
    ``exp(-busy time since / horizon_s)``.

    :attr:`factor` is their ratio, at least 1 (work never takes less than its measured compute)
    and at most :data:`MAX_PACE`; 1 until a chunk is observed. A ratio of sums rather than an
    average of ratios: a stall of one short chunk counts by its length, not by how many times
    its tiny estimate it took.

    >>> Pace().observe(wall_s=0.006, work_s=0.002).factor
    3.0
    """

    wall_s: float = 0.0
    work_s: float = 0.0

    @property
    def factor(self) -> float:
        if self.work_s <= 0:
            return 1.0
        ratio = self.wall_s / self.work_s  # (read per arrival: no min/max calls)
        return MAX_PACE if ratio > MAX_PACE else ratio if ratio > 1.0 else 1.0

    def observe(self, *, wall_s: float, work_s: float,
                horizon_s: float = PACE_HORIZON_S) -> Pace:
        """The pace after one chunk that took ``wall_s`` for ``work_s`` of estimated work
        (a chunk with no estimate, e.g. a model's first, teaches nothing)."""
        if work_s <= 0 or wall_s < 0:
            return self
        decay = math.exp(-wall_s / horizon_s)
        return Pace(self.wall_s * decay + wall_s, self.work_s * decay + work_s)


def request_work_s(model: ModelView, request: RequestView, *, swap_paid: bool) -> float:
    """Estimated device time of ``request``'s remaining rows, plus the model's swap-in unless it
    is resident or already paid for by work ahead (``swap_paid``)."""
    swap = 0.0 if model.resident or swap_paid else model.swap_cost_s
    return swap + request.rows * model.row_cost_s


def queue_delay_by_class(models: Iterable[ModelView], *, pace: float = 1.0
                         ) -> tuple[float, float, float, float]:
    """Estimated wait of a new arrival of each class (index = ``Priority`` value): the work of
    every queued request of that class or a more urgent one (aging and deadlines aside), with
    each model's swap-in counted once (a model loading from disk off the device loop holds
    the device for its compute only), times the device's ``pace`` (:attr:`Pace.factor`)."""
    delay = [0.0, 0.0, 0.0, 0.0]
    for m in models:
        paid = [m.loading] * 4
        for r in m.requests:
            for cls in range(int(r.priority), 4):
                delay[cls] += request_work_s(m, r, swap_paid=paid[cls])
                paid[cls] = True
    return delay[0] * pace, delay[1] * pace, delay[2] * pace, delay[3] * pace
