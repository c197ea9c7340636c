"""Latency histogram: an HDR histogram (``hdrhistogram`` package) in microseconds.

Precision: 3 significant digits, i.e. any reported percentile is within 0.1% of the recorded
value it stands for, from 1 µs to 1 hour; values outside that range are clamped to it (and the
clamp count is kept). Memory is fixed (~200 KiB) whatever the number of samples.
"""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram

__all__ = ["PERCENTILES", "LatencyHistogram"]

# Reported percentiles: key in reports -> percentile.
PERCENTILES: dict[str, float] = {
    "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9,
}

_LOW_US = 1
_HIGH_US = 3600 * 1_000_000
_SIG_FIGS = 3


class LatencyHistogram:
    """Record latencies in seconds; read percentiles in milliseconds."""

    def __init__(self, values_s: Iterable[float] = ()) -> None:
        self._h = HdrHistogram(_LOW_US, _HIGH_US, _SIG_FIGS)
        self.clamped = 0
        for v in values_s:
            self.record(v)

    def record(self, seconds: float) -> None:
        """Add one latency (seconds)."""
        us = round(seconds * 1e6)
        if us < _LOW_US or us > _HIGH_US:
            self.clamped += 1
            us = min(max(us, _LOW_US), _HIGH_US)
        self._h.record_value(us)

    def add(self, other: LatencyHistogram) -> None:
        """Merge ``other`` in exactly: same bucket layout, so counts simply add."""
        self._h.add(other._h)
        self.clamped += other.clamped

    def encode(self) -> bytes:
        """Compressed HdrHistogram wire form plus the clamp count (to merge across processes)."""
        return str(self.clamped).encode() + b":" + self._h.encode()

    @classmethod
    def decode(cls, data: bytes) -> LatencyHistogram:
        """Inverse of ``encode``."""
        clamped, _, wire = data.partition(b":")
        h = cls()
        h._h.add(HdrHistogram.decode(wire))
        h.clamped = int(clamped)
        return h

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def percentile_ms(self, p: float) -> float | None:
        """Value at percentile ``p`` (0-100) in ms, None when empty."""
        if self.count == 0:
            return None
        return self._h.get_value_at_percentile(p) / 1000.0

    def summary_ms(self) -> dict[str, float | None]:
        """p50, p90, p95, p99, p99.9, max and mean in ms (None when empty)."""
        out: dict[str, float | None] = {k: self.percentile_ms(p) for k, p in PERCENTILES.items()}
        empty = self.count == 0
        out["max"] = None if empty else self._h.get_max_value() / 1000.0
        out["mean"] = None if empty else self._h.get_mean_value() / 1000.0
        return out
