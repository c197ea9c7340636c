"""Shared estimates: the one moving average and the one queue-delay model.

Pure functions. The queue-delay model is used both by the scheduler's triage (which requests can
still meet their deadline behind the work ranked before them) and by the routing stats a replica
publishes (how long a new request of each class would wait), so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from policies.scheduling import ModelView, RequestView

__all__ = ["EWMA_ALPHA", "ewma", "queue_delay_by_class", "request_work_s"]

# Weight of a new sample. 0.2 follows a change within ~5 samples yet a single outlier moves the
# estimate by only a fifth of its excess.
EWMA_ALPHA = 0.2


def ewma(prev: float | None, sample: float, *, alpha: float = EWMA_ALPHA) -> float:
    """Exponentially weighted moving average; the first sample (``prev`` None or infinite) is
    taken as is.

    >>> ewma(None, 2.0), ewma(1.0, 2.0)
    (2.0, 1.2)
    """
    if prev is None or prev == float("inf"):
        return sample
    return (1.0 - alpha) * prev + alpha * sample


def request_work_s(model: ModelView, request: RequestView, *, swap_paid: bool) -> float:
    """Estimated device time of ``request``'s remaining rows, plus the model's swap-in unless it
    is resident or already paid for by work ahead (``swap_paid``)."""
    swap = 0.0 if model.resident or swap_paid else model.swap_cost_s
    return swap + request.rows * model.row_cost_s


def queue_delay_by_class(models: Iterable[ModelView]) -> tuple[float, float, float, float]:
    """Estimated wait of a new arrival of each class (index = ``Priority`` value): the work of
    every queued request of that class or a more urgent one (aging and deadlines aside), with
    each model's swap-in counted once (a model loading from disk off the device loop holds
    the device for its compute only)."""
    delay = [0.0, 0.0, 0.0, 0.0]
    for m in models:
        paid = [m.loading] * 4
        for r in m.requests:
            for cls in range(int(r.priority), 4):
                delay[cls] += request_work_s(m, r, swap_paid=paid[cls])
                paid[cls] = True
    return delay[0], delay[1], delay[2], delay[3]
