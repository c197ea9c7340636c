"""Recent outcomes per model and per priority class for the status views (``timeshare status
--watch``, ``/ui``).

Per model: requests per second over the last ``rate_window_s``, p99 latency, cache-hit, degraded
and error shares over the last ``window_s``, and the cumulative count. Bounded: at most
``max_samples`` samples per model and ``max_models`` models (least recently seen dropped), so
unknown model names in bad requests cannot grow it.

Per priority class (:class:`pool.ClassWindow`, the last 30 to 36 s, fixed memory): answered
requests per second and their end-to-end latency at this ingress replica (from arrival at the
edge to the answer; the client's own hops are not in it), and counts of the requests that were

- ``shed``: admission (at the edge or in the pipeline) or a caller quota turned them away: a
  cache hit or a fallback answered them, or they got 429/503 (the edge's own: :meth:`edge_refused`);
- ``refused``: a pool refused them unrun (its queue was full, or their deadline could not be met
  behind its queue): a fallback answered them, or they got 503/504;
- ``errors``: they failed otherwise (5xx).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fallbacks.chain import POOL_REFUSALS
from policies.priority import Priority
from pool.class_window import ClassWindow
from router.errors import QuotaExceeded, TimeshareError
from router.pipeline import Recorder

__all__ = ["ModelStatsRecorder"]

_HITS = frozenset({"memory", "redis", "semantic"})
_SHED, _REFUSED, _ERRORS = 0, 1, 2  # the class window's counters, in this order


@dataclass(slots=True)
class _Model:
    samples: deque[tuple[float, float, bool, bool, bool]] = field(default_factory=deque)
    total: int = 0


class ModelStatsRecorder(Recorder):
    def __init__(self, *, window_s: float = 30.0, rate_window_s: float = 10.0,
                 max_samples: int = 4096, max_models: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not 0 < rate_window_s <= window_s:
            raise ValueError(f"need 0 < rate_window_s <= window_s, got {rate_window_s}, "
                             f"{window_s}")
        self._window_s, self._rate_s = window_s, rate_window_s
        self._max_samples, self._max_models, self._clock = max_samples, max_models, clock
        self._models: OrderedDict[str, _Model] = OrderedDict()
        self.classes = ClassWindow(series=("latency",), counters=("shed", "refused", "errors"),
                                   clock=clock)

    def edge_refused(self, priority: Priority) -> None:
        """The edge answered a request of ``priority`` 429/503 itself (it never reached the
        pipeline): counted as shed."""
        self.classes.count(priority, _SHED)

    def record(self, request, response, error, elapsed_s) -> None:
        m = self._models.get(request.model)
        if m is None:
            m = self._models[request.model] = _Model(deque(maxlen=self._max_samples))
            if len(self._models) > self._max_models:
                self._models.popitem(last=False)
        else:
            self._models.move_to_end(request.model)
        hit = response is not None and response.cache in _HITS
        degraded = response is not None and response.degraded
        now = self._clock()
        m.samples.append((now, elapsed_s, hit, degraded, error is not None))
        m.total += 1
        self._record_class(request, response, error, elapsed_s, now)

    def _record_class(self, request, response, error, elapsed_s: float, now: float) -> None:
        classes, priority = self.classes, request.priority
        if error is not None:
            cause = getattr(error, "cause", None)  # TimeshareError's: shed, refused or None
            if isinstance(error, QuotaExceeded) or cause == "shed":
                classes.count(priority, _SHED, now=now)
            elif cause == "refused":
                classes.count(priority, _REFUSED, now=now)
            elif not (isinstance(error, TimeshareError) and error.status_code < 500):
                classes.count(priority, _ERRORS, now=now)  # (a caller's mistake is neither)
            return
        if response is None:
            return
        # End to end at this replica: from the edge's arrival stamp (time.monotonic, as this
        # recorder's clock in the app; a front proxy's X-Request-Start moves it earlier) when
        # there is one, else from the pipeline's start.
        arrival = request.arrival_s
        classes.observe(priority, (elapsed_s if arrival is None else now - arrival,), now=now)
        if response.degraded:
            reason = response.reason or ""
            if reason.startswith("shed"):
                classes.count(priority, _SHED, now=now)
            elif reason in POOL_REFUSALS:
                classes.count(priority, _REFUSED, now=now)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Plain JSON per model: rate_per_s, p99_ms, cache_hit_share, degraded_share,
        error_share (None when no request in the window) and requests (cumulative)."""
        now = self._clock()
        out: dict[str, dict[str, Any]] = {}
        for name, m in sorted(self._models.items()):
            while m.samples and m.samples[0][0] < now - self._window_s:
                m.samples.popleft()
            recent = list(m.samples)
            n = len(recent)
            row: dict[str, Any] = {
                "requests": m.total,
                "rate_per_s": sum(1 for s in recent if s[0] > now - self._rate_s) / self._rate_s,
                "p99_ms": None, "cache_hit_share": None, "degraded_share": None,
                "error_share": None,
            }
            if n:
                lat = sorted(s[1] for s in recent)
                row.update(p99_ms=lat[min(n - 1, math.ceil(0.99 * n) - 1)] * 1e3,
                           cache_hit_share=sum(s[2] for s in recent) / n,
                           degraded_share=sum(s[3] for s in recent) / n,
                           error_share=sum(s[4] for s in recent) / n)
            out[name] = row
        return out
