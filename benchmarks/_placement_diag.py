"""Where benchmarks.placement's tail comes from: a breakdown of the requests that missed.

Each request is one :class:`Row`: when it arrived, its latency, how it ended (``ok``, a pool
refusal kind such as ``expired``, or ``timeout``/``error`` on the client side), and for answers
the pool's own split of its time (queued, swapping its own model in, computing) and which
replica ran it. A request that missed its deadline is put in one cause, first match wins:

- ``refused_<kind>``: the pool did not run it (e.g. ``expired``: the scheduler saw it could not
  finish in time behind the work queued before it);
- ``own_swap``: answered late, and its own model's swap-in took at least a third of it (a cold
  model's disk reload or copy, which this request paid or waited on inside its chunk);
- ``queued``: answered late, most of its time queued on the replica (behind other models' work
  and swaps);
- ``slow_chunk``: answered late, most of its time in its own chunk (the pool's compute time is
  the chunk's wall time: the forward pass, plus the wait for the device thread when that was
  busy, e.g. with a freshly loaded TorchScript model optimising its graph);
- ``outside_pool``: answered late with most of its time outside the pool's accounting (routing,
  the handle's transport, the event loop of a busy 2-core machine).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

__all__ = ["DISK_RELOAD_MS", "Row", "breakdown"]

# A host-tier copy of one 13.7 MB encoder takes a few ms; a swap-in this long was a disk reload.
DISK_RELOAD_MS = 50.0


@dataclass(frozen=True, slots=True)
class Row:
    offset_s: float
    latency_s: float
    outcome: str  # "ok", a PoolRefusal kind, "timeout" or "error"
    model: str
    queue_ms: float = 0.0
    swap_ms: float = 0.0
    compute_ms: float = 0.0
    device: str = ""


def _cause(r: Row) -> str:
    if r.outcome != "ok":
        return f"refused_{r.outcome}"
    ms = r.latency_s * 1e3
    if r.swap_ms >= ms / 3:
        return "own_swap"
    if r.queue_ms >= ms / 2:
        return "queued"
    if r.compute_ms >= ms / 2:
        return "slow_chunk"
    return "outside_pool"


def _p(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(np.array(xs) * 1e3, q)), 1) if xs else None


def _phase(rows: list[Row], deadline_s: float, hot: str) -> dict:
    late = [r for r in rows if r.outcome != "ok" or r.latency_s > deadline_s]
    answered = [r for r in rows if r.outcome == "ok"]
    refused = [r.latency_s for r in rows if r.outcome != "ok"]
    late_ok = [r for r in answered if r.latency_s > deadline_s]
    inside = [(r.queue_ms + r.swap_ms + r.compute_ms) / 1e3 for r in late_ok]
    outside = [r.latency_s - i for r, i in zip(late_ok, inside, strict=True)]
    tail = sorted(rows, key=lambda r: r.latency_s)[-max(1, len(rows) // 100):] if rows else []
    return {
        "requests": len(rows), "p99_ms": _p([r.latency_s for r in rows], 99),
        "missed": len(late),
        "missed_by_cause": dict(Counter(_cause(r) for r in late).most_common()),
        "slowest_1pct_by_cause": dict(Counter(_cause(r) for r in tail).most_common()),
        "slowest_1pct_models": dict(Counter(r.model for r in tail).most_common(5)),
        "refused_latency_ms_p50_p99": [_p(refused, 50), _p(refused, 99)],
        "answered_disk_reloads": sum(1 for r in answered if r.swap_ms >= DISK_RELOAD_MS),
        "missed_hot_model": sum(1 for r in late if r.model == hot),
        "missed_top_models": dict(Counter(r.model for r in late).most_common(5)),
        "answered_swap_ms_p99": _p([r.swap_ms / 1e3 for r in answered], 99),
        "answered_queue_ms_p99": _p([r.queue_ms / 1e3 for r in answered], 99),
        "answered_with_swap": sum(1 for r in answered if r.swap_ms > 0),
        # Of the answers that came late: time outside the pool's own accounting (latency less
        # queued, swap and compute), and time inside it, ms p50 / p99.
        "late_answers_outside_ms_p50_p99": [_p(outside, 50), _p(outside, 99)],
        "late_answers_inside_ms_p50_p99": [_p(inside, 50), _p(inside, 99)],
    }


def breakdown(rows: list[Row], *, deadline_s: float, half_s: float, hot: str) -> dict:
    """Per phase (``zipf``: before the hot model turns hot; ``hot``: after), the requests that
    missed their deadline by cause, and the pool's time split of the answered ones."""
    return {"zipf": _phase([r for r in rows if r.offset_s < half_s], deadline_s, hot),
            "hot": _phase([r for r in rows if r.offset_s >= half_s], deadline_s, hot)}
