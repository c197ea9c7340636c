"""Recent outcomes per model for the status views (``timeshare status --watch``, ``/ui``).

Per model: requests per second over the last ``rate_window_s``, p99 latency, cache-hit, degraded
and error shares over the last ``window_s``, and the cumulative count. Bounded: at most
``max_samples`` samples per model and ``max_models`` models (least recently seen dropped), so
unknown model names in bad requests cannot grow it.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from router.pipeline import Recorder

__all__ = ["ModelStatsRecorder"]

_HITS = frozenset({"memory", "redis", "semantic"})


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
        m.samples.append((self._clock(), elapsed_s, hit, degraded, error is not None))
        m.total += 1

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
