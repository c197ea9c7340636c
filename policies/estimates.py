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
    "MAX_PACE",
    "PACE_HORIZON_S",
    "ChunkCost",
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


# Updated in place: a model's estimate, one per model (as its moving averages are floats on its
# queue entry), so a chunk's measurement builds nothing (README, "A request's walk").
@dataclass(slots=True)
class ChunkCost:
    """A chunk's cost as a fixed part plus a part per row, fitted to measured chunks by
    exponentially weighted least squares (weight :data:`EWMA_ALPHA` per new chunk).

    A cost per row alone (a chunk's cost over its rows, averaged) reads a forward that is mostly
    a fixed cost as dear per row: on a busy 2-core host digits-small's forward took 140-200 µs
    of CPU a chunk from 2 to 14 rows and 70 µs for one row, so after a run of one-row chunks a
    12-row chunk was estimated at over 1 ms and left the event loop for the device thread,
    where it then cost twice the CPU (docs/PERFORMANCE.md, "A chunk's cost is mostly fixed").

    Where the rows measured so far hardly vary, nothing tells the parts apart and the cost is
    taken as proportional to the rows (the per-row estimate). Past the rows measured (their
    mean plus two standard deviations) it grows in proportion to the rows from that edge on,
    so a chunk larger than any seen is never estimated cheaper than a per-row reading of the
    edge would make it.

    >>> c = ChunkCost.first(rows=1, cost_s=70e-6)
    >>> for _ in range(20):
    ...     c.observe(rows=12, cost_s=180e-6)
    ...     c.observe(rows=1, cost_s=70e-6)
    >>> round(c.estimate_s(12) * 1e6), round(c.estimate_s(1) * 1e6)
    (180, 70)
    >>> round(ChunkCost.first(rows=4, cost_s=400e-6).estimate_s(8) * 1e6)
    800
    """

    rows: float  # weighted mean of the rows
    cost_s: float  # weighted mean of the cost
    var_rows: float = 0.0  # weighted variance of the rows
    cov_s: float = 0.0  # weighted covariance of rows and cost

    @classmethod
    def first(cls, *, rows: int, cost_s: float) -> ChunkCost:
        """The fit of one chunk: its cost, read per row."""
        return cls(float(max(rows, 1)), cost_s)

    def restart(self, *, rows: int, cost_s: float) -> None:
        """Forget every chunk before this one (a stale estimate is replaced whole)."""
        self.rows, self.cost_s, self.var_rows, self.cov_s = float(max(rows, 1)), cost_s, 0.0, 0.0

    def observe(self, *, rows: int, cost_s: float, alpha: float = EWMA_ALPHA) -> None:
        """Fit one more chunk of ``rows`` rows that cost ``cost_s``."""
        d_rows = max(rows, 1) - self.rows
        d_cost = cost_s - self.cost_s
        keep = 1.0 - alpha
        self.var_rows = keep * (self.var_rows + alpha * d_rows * d_rows)
        self.cov_s = keep * (self.cov_s + alpha * d_rows * d_cost)
        self.rows += alpha * d_rows
        self.cost_s += alpha * d_cost

    @property
    def per_row_s(self) -> float:
        """The cost of one more row (at most the mean cost per row: the fixed part is never
        negative; at least 0)."""
        proportional = self.cost_s / self.rows
        if self.var_rows < _VARIED_ROWS:
            return proportional
        slope = self.cov_s / self.var_rows
        return proportional if slope > proportional else slope if slope > 0.0 else 0.0

    def estimate_s(self, rows: int) -> float:
        """The estimated cost of a chunk of ``rows`` rows."""
        per_row = self.per_row_s
        fixed = self.cost_s - per_row * self.rows
        edge = self.rows + 2.0 * math.sqrt(self.var_rows)
        if rows <= edge:
            return fixed + per_row * rows
        return (fixed + per_row * edge) * rows / edge


# Below this weighted variance of the rows (a standard deviation of half a row) the chunks
# measured are all about one size: their cost says nothing of a fixed part.
_VARIED_ROWS = 0.25


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
