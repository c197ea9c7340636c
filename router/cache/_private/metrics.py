"""Cache counters (hits, misses, bypasses per tier, writes, skips) and verified mode's gauges."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation


class CacheCounters:
    """Monotonic counters keyed ``"<tier>.<event>"``, e.g. ``redis.bypass``."""

    def __init__(self) -> None:
        self._c: Counter[str] = Counter()

    def inc(self, name: str, n: int = 1) -> None:
        """Add ``n`` to counter ``name``."""
        self._c[name] += n

    def snapshot(self) -> dict[str, int]:
        """A copy of all counters, sorted by name."""
        return dict(sorted(self._c.items()))


def register_error_rate_metric(meter_provider: Any, read: Callable[[], Any]) -> None:
    """Export verified mode's observed error rate as the OpenTelemetry gauge
    ``timeshare.cache.semantic.error_rate`` (Prometheus: ``timeshare_cache_semantic_error_rate``)
    and its threshold as ``timeshare.cache.semantic.threshold``.

    ``read()`` returns a ``VerifierStatus`` or None (mode off: nothing is observed).
    """
    def rate(_: CallbackOptions) -> list[Observation]:
        st = read()
        if st is None or st.observed_error_rate is None:
            return []
        return [Observation(st.observed_error_rate, {"max_error_rate": st.max_error_rate})]

    def threshold(_: CallbackOptions) -> list[Observation]:
        st = read()
        return [] if st is None or st.threshold is None else [Observation(st.threshold)]

    meter = meter_provider.get_meter("timeshare.cache")
    meter.create_observable_gauge(
        "timeshare.cache.semantic.error_rate", callbacks=[rate],
        description="Verified semantic hits the fresh answer contradicted / verified hits")
    meter.create_observable_gauge(
        "timeshare.cache.semantic.threshold", callbacks=[threshold],
        description="Verified mode's learned global similarity threshold")
