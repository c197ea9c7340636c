"""OpenTelemetry metrics and traces for the Timeshare pipeline.

Only what Ray Serve does not already export: per-model/route request outcomes (``served_by``,
cache result, degraded), scheduler queue delay, swaps, preemptions, breaker state and alerts sent.
(Ray Serve already exports per-deployment request counts/latencies and replica health.)

Prometheus names (what ``deploy/grafana/timeshare.json`` queries):

==================================  ============================================================
``timeshare_request_duration_seconds``  histogram; model, route, served_by, cache, degraded
``timeshare_queue_delay_seconds``       histogram; model, priority, device
``timeshare_swaps_total``               counter; model, device, direction (in/out)
``timeshare_preemptions_total``         counter; device, priority
``timeshare_breaker_state``             gauge 0 closed, 1 half-open, 2 open; model, pool
``timeshare_alerts_sent_total``         counter; receiver, channel, severity, outcome
``timeshare_alerts_dropped_total``      counter; channel
==================================  ============================================================

Each :class:`Telemetry` owns its MeterProvider/TracerProvider (never the process globals), so
tests can build one with in-memory readers: ``Telemetry.in_memory()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import INVALID_SPAN, Span

__all__ = ["BREAKER_STATES", "SECONDS_BUCKETS", "Telemetry"]

BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
SECONDS_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


class Telemetry:
    """Metric instruments and a tracer. Pass readers (e.g. ``InMemoryMetricReader``) and/or
    ``prometheus=True`` (a ``PrometheusMetricReader`` on ``registry``, default the global one)."""

    def __init__(
        self,
        *,
        readers: Sequence[MetricReader] = (),
        prometheus: bool = False,
        registry: Any = None,
        span_exporter: SpanExporter | None = None,
        service_name: str = "timeshare",
    ) -> None:
        all_readers = list(readers)
        self.prometheus_reader: MetricReader | None = None
        if prometheus:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader

            kw = {"registry": registry} if registry is not None else {}
            self.prometheus_reader = PrometheusMetricReader(**kw)
            all_readers.append(self.prometheus_reader)
        resource = Resource.create({"service.name": service_name})
        self.meter_provider = MeterProvider(metric_readers=all_readers, resource=resource)
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracing = span_exporter is not None
        if span_exporter is not None:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        self.tracer = self.tracer_provider.get_tracer("timeshare")
        m = self.meter_provider.get_meter("timeshare")
        hist = {"explicit_bucket_boundaries_advisory": list(SECONDS_BUCKETS)}
        self._request = m.create_histogram(
            "timeshare.request.duration",
            unit="s",
            description="End-to-end request duration",
            **hist,
        )
        self._queue = m.create_histogram(
            "timeshare.queue.delay",
            unit="s",
            description="Wait in the device scheduler queue",
            **hist,
        )
        self._swaps = m.create_counter(
            "timeshare.swaps", description="Model swaps between host and device"
        )
        self._preempt = m.create_counter(
            "timeshare.preemptions", description="Batches preempted at a chunk boundary"
        )
        self._breaker = m.create_gauge(
            "timeshare.breaker.state", description="0 closed, 1 half-open, 2 open"
        )
        self._sent = m.create_counter(
            "timeshare.alerts.sent", description="Alert notifications by outcome"
        )
        self._dropped = m.create_counter(
            "timeshare.alerts.dropped", description="Alert notifications dropped (queue full)"
        )

    @classmethod
    def in_memory(cls) -> Telemetry:
        """For tests: metrics in ``.metric_reader``, finished spans in ``.span_exporter``."""
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
        t = cls(readers=[reader], span_exporter=spans)
        t.metric_reader, t.span_exporter = reader, spans  # type: ignore[attr-defined]
        return t

    def record_request(
        self,
        *,
        model: str,
        route: str,
        served_by: str,
        cache: str,
        degraded: bool,
        duration_s: float,
    ) -> None:
        """One answered request. ``cache``: hit_local, hit_redis, hit_semantic or miss."""
        self._request.record(
            duration_s,
            {
                "model": model,
                "route": route,
                "served_by": served_by,
                "cache": cache,
                "degraded": str(bool(degraded)).lower(),
            },
        )

    def record_queue_delay(self, *, model: str, priority: str, device: str, delay_s: float) -> None:
        self._queue.record(delay_s, {"model": model, "priority": priority, "device": device})

    def record_swap(self, *, model: str, device: str, direction: str) -> None:
        """``direction``: ``in`` (host -> device) or ``out`` (device copy freed)."""
        if direction not in ("in", "out"):
            raise ValueError(f"direction must be 'in' or 'out', got {direction!r}")
        self._swaps.add(1, {"model": model, "device": device, "direction": direction})

    def record_preemption(self, *, device: str, priority: str) -> None:
        self._preempt.add(1, {"device": device, "priority": priority})

    def set_breaker_state(self, *, model: str, pool: str, state: str) -> None:
        """``state``: closed, half_open or open."""
        if state not in BREAKER_STATES:
            raise ValueError(f"state must be one of {', '.join(BREAKER_STATES)}, got {state!r}")
        self._breaker.set(BREAKER_STATES[state], {"model": model, "pool": pool})

    def record_alert_sent(
        self, *, receiver: str, channel: str, severity: str, outcome: str
    ) -> None:
        """``outcome``: ok or failed."""
        self._sent.add(
            1, {"receiver": receiver, "channel": channel, "severity": severity, "outcome": outcome}
        )

    def record_alert_dropped(self, *, channel: str, count: int = 1) -> None:
        self._dropped.add(count, {"channel": channel})

    @contextlib.contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[Span]:
        """A trace span: ``with telemetry.span("dispatch", model="digits") as s: ...``.
        Without an exporter nobody can read a span: a no-op one, free of the SDK's per-span
        cost (about a sixth of a cache hit's CPU in the ingress, docs/PERFORMANCE.md)."""
        if not self.tracing:
            yield INVALID_SPAN
            return
        with self.tracer.start_as_current_span(name, attributes=attributes) as s:
            yield s

    def shutdown(self) -> None:
        """Flush and detach readers (the Prometheus collector is unregistered)."""
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()
