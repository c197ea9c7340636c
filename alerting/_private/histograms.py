"""Per-request histograms aggregated in process and exported to Prometheus by a collector.

The OpenTelemetry SDK's ``Histogram.record`` costs 3-6 µs a point (it copies and cleans the
attributes, hashes them into a frozenset, takes a lock and offers an exemplar), and in the
ingress it was about a tenth of a cache hit's CPU (docs/PERFORMANCE.md). The two histograms
recorded once per request are kept here instead: a point is one dict lookup on a tuple of label
values, one ``bisect`` and two additions. A Prometheus scrape reads them through
:class:`HistogramCollector` under the same names and labels the SDK's exporter wrote (the
``otel_scope_*`` labels included, so stored series continue).

Threading: points are recorded on one thread (the replica's event loop); a scrape runs on the
metrics server's thread. New label sets are added under a lock that the scrape also takes; a
scrape copies each cell (one C-level list copy under the GIL), so a point recorded during a
scrape may show in the buckets and not yet in the sum until the next scrape, as in any
lock-free counter read.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

__all__ = ["HistogramCollector", "HistogramPoint", "LabelledHistogram"]

_INF = float("inf")
_SCOPE = {"otel_scope_name": "timeshare", "otel_scope_schema_url": "", "otel_scope_version": ""}


@dataclass(frozen=True, slots=True)
class HistogramPoint:
    """One label set's cumulative state: ``counts[i]`` values in bucket ``i`` (the last one is
    above every bound), their ``sum`` and ``count``."""

    labels: dict[str, str]
    counts: tuple[int, ...]
    sum: float
    count: int


class LabelledHistogram:
    """A cumulative histogram per label set. ``bounds``: bucket upper bounds (inclusive, as
    Prometheus's ``le``), increasing."""

    def __init__(self, name: str, description: str, labels: Sequence[str],
                 bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"{name}: bucket bounds must be increasing, got {list(bounds)}")
        self.name = name
        self.description = description
        self.label_names = tuple(labels)
        self.bounds = tuple(float(b) for b in bounds)
        self._n = len(self.bounds) + 1  # cell: [bucket counts..., sum]
        self._cells: dict[tuple[str, ...], list[float]] = {}
        self._lock = threading.Lock()

    def record(self, value: float, labels: tuple[str, ...]) -> None:
        """One point; ``labels``: the values in ``label_names`` order. A negative or non-finite
        value is dropped, as the OpenTelemetry SDK drops it (a NaN would poison the sum)."""
        if not 0.0 <= value < _INF:  # False for NaN too
            return
        cell = self._cells.get(labels)
        if cell is None:
            if len(labels) != len(self.label_names):
                raise ValueError(f"{self.name}: {len(self.label_names)} label values expected "
                                 f"({', '.join(self.label_names)}), got {labels!r}")
            with self._lock:
                cell = self._cells.setdefault(labels, [0] * self._n + [0.0])
        cell[bisect_left(self.bounds, value)] += 1
        cell[self._n] += value

    def snapshot(self) -> list[HistogramPoint]:
        """Every label set's state, copied."""
        with self._lock:
            cells = [(k, list(v)) for k, v in self._cells.items()]
        out = []
        for labels, cell in cells:
            counts = tuple(int(c) for c in cell[: self._n])
            out.append(HistogramPoint(dict(zip(self.label_names, labels, strict=True)), counts,
                                      float(cell[self._n]), sum(counts)))
        return out


class HistogramCollector(Collector):
    """A Prometheus collector over :class:`LabelledHistogram` s (cumulative ``_bucket``,
    ``_count`` and ``_sum`` series)."""

    def __init__(self, histograms: Sequence[LabelledHistogram]) -> None:
        self.histograms = tuple(histograms)

    def describe(self) -> list[HistogramMetricFamily]:
        # Nothing declared up front, as the SDK's own collector: the registry then does not
        # collect at registration to check names (it would see these families, still empty).
        return []

    def collect(self) -> Iterator[HistogramMetricFamily]:
        for h in self.histograms:
            names = [*h.label_names, *_SCOPE]
            family = HistogramMetricFamily(h.name, h.description, labels=names)
            for p in h.snapshot():
                running, buckets = 0, []
                for bound, n in zip([*h.bounds, _INF], p.counts, strict=True):
                    running += n
                    buckets.append(("+Inf" if bound == _INF else repr(bound), running))
                family.add_metric([*p.labels.values(), *_SCOPE.values()], buckets, p.sum)
            yield family
