"""OpenTelemetry metrics and traces for the Timeshare pipeline.

Only what Ray Serve does not already export: per-model/route request outcomes (``served_by``,
cache result, degraded), scheduler queue delay, swaps, preemptions, breaker state and alerts sent.
(Ray Serve already exports per-deployment request counts/latencies and replica health.)

Prometheus names (what ``deploy/grafana/timeshare.json`` queries):

==========================================  ====================================================
``timeshare_request_duration_seconds``      histogram; model, route, served_by, cache, degraded
``timeshare_queue_delay_seconds``           histogram; model, priority, device
``timeshare_breaker_state``                 gauge 0 closed, 1 half-open, 2 open; model, pool
``timeshare_alerts_sent_total``             counter; receiver, channel, severity, outcome
``timeshare_alerts_dropped_total``          counter; channel
==========================================  ====================================================

Per pool replica (labels pool, device, replica; read at scrape time, see
``alerting._private.device_instruments``): ``timeshare_swaps_total`` (direction in/out),
``timeshare_swap_bytes_total``, ``timeshare_swap_duration_seconds_total``,
``timeshare_batches_total``, ``timeshare_compute_duration_seconds_total`` (its rate: the
device's busy share),
``timeshare_preemptions_total`` (priority), ``timeshare_evictions_total``,
``timeshare_queue_depth`` (priority), ``timeshare_device_memory_usage_bytes`` (state used/free),
``timeshare_device_memory_limit_bytes``, ``timeshare_host_memory_usage_bytes``,
``timeshare_models_resident`` (tier device/host); per pool
``timeshare_pool_replica_restarts_total``.

The two per-request histograms are aggregated in process (``alerting._private.histograms``:
the SDK's per-point cost was about a tenth of a cache hit's CPU) and reach Prometheus by their
own collector, under the names and labels above; OpenTelemetry readers other than Prometheus do
not see them (``Telemetry.requests.snapshot()`` reads them in process).

Each :class:`Telemetry` owns its MeterProvider/TracerProvider (never the process globals), so
tests can build one with in-memory readers: ``Telemetry.in_memory()``.

Traces: spans are recorded only when a span exporter or processor is given (``tracing``); the
ingress gives an OTLP one when ``telemetry.otlp_endpoint`` is set (``alerting.otlp``; the
request's spans are built by ``router.tracing``). Sampling is parent-based: a request whose
caller's trace is sampled (W3C ``traceparent``) is traced, and a request with no parent is
traced with probability ``sample_ratio`` (by trace id).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import INVALID_SPAN, Span
from prometheus_client import REGISTRY

from alerting._private.device_instruments import DeviceSample, register_device_instruments
from alerting._private.histograms import HistogramCollector, LabelledHistogram

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
    ``prometheus=True`` (a ``PrometheusMetricReader`` on ``registry``, default the global one).
    Spans: ``span_exporter`` (exported as each span ends, for tests) and/or ``span_processor``
    (e.g. ``alerting.otlp.otlp_span_processor``), sampled parent-based with ``sample_ratio``
    for requests without a parent."""

    def __init__(
        self,
        *,
        readers: Sequence[MetricReader] = (),
        prometheus: bool = False,
        registry: Any = None,
        span_exporter: SpanExporter | None = None,
        span_processor: SpanProcessor | None = None,
        sample_ratio: float = 1.0,
        service_name: str = "timeshare",
    ) -> None:
        if not 0.0 <= sample_ratio <= 1.0:
            raise ValueError(f"sample_ratio must be within [0, 1], got {sample_ratio!r}")
        all_readers = list(readers)
        self.prometheus_reader: MetricReader | None = None
        if prometheus:
            kw = {"registry": registry} if registry is not None else {}
            self.prometheus_reader = PrometheusMetricReader(**kw)
            all_readers.append(self.prometheus_reader)
        resource = Resource.create({"service.name": service_name})
        self.meter_provider = MeterProvider(metric_readers=all_readers, resource=resource)
        self.tracer_provider = TracerProvider(
            resource=resource, sampler=ParentBased(TraceIdRatioBased(sample_ratio)))
        self.tracing = span_exporter is not None or span_processor is not None
        if span_exporter is not None:
            self.tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        if span_processor is not None:
            self.tracer_provider.add_span_processor(span_processor)
        self.tracer = self.tracer_provider.get_tracer("timeshare")
        self.meter = m = self.meter_provider.get_meter("timeshare")
        # The two per-request histograms are aggregated in process, not by the SDK (its record
        # is 3-6 µs a point, alerting._private.histograms); Prometheus reads them by collector.
        self.requests = LabelledHistogram(
            "timeshare_request_duration_seconds", "End-to-end request duration",
            ("model", "route", "served_by", "cache", "degraded"), SECONDS_BUCKETS)
        self.queue_delays = LabelledHistogram(
            "timeshare_queue_delay_seconds", "Wait in the device scheduler queue",
            ("model", "priority", "device"), SECONDS_BUCKETS)
        self._collector: tuple[Any, HistogramCollector] | None = None
        if prometheus:
            reg = registry if registry is not None else REGISTRY
            self._collector = (reg, HistogramCollector((self.requests, self.queue_delays)))
            reg.register(self._collector[1])
        self._sent = m.create_counter(
            "timeshare.alerts.sent", description="Alert notifications by outcome"
        )
        self._dropped = m.create_counter(
            "timeshare.alerts.dropped", description="Alert notifications dropped (queue full)"
        )

    @property
    def histograms_exported(self) -> bool:
        """Whether a Prometheus collector reads the per-request histograms (the ingress records
        them only then)."""
        return self._collector is not None

    @classmethod
    def in_memory(cls, *, sample_ratio: float = 1.0) -> Telemetry:
        """For tests: metrics in ``.metric_reader``, finished spans in ``.span_exporter``."""
        reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
        t = cls(readers=[reader], span_exporter=spans, sample_ratio=sample_ratio)
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
        self.requests.record(
            duration_s, (model, route, served_by, cache, "true" if degraded else "false"))

    def record_queue_delay(self, *, model: str, priority: str, device: str, delay_s: float) -> None:
        self.queue_delays.record(delay_s, (model, priority, device))

    def observe_devices(
        self,
        read: Callable[[], Iterable[tuple[str, DeviceSample]]],
        restarts: Callable[[], dict[str, int]],
    ) -> None:
        """Export the pool replicas' device counters: ``read`` yields (pool, sample) for every
        live replica at each collection; ``restarts`` gives replica restarts per pool."""
        register_device_instruments(self.meter, read, restarts)

    def observe_breakers(self, read: Callable[[], Mapping[tuple[str, str], str]]) -> None:
        """Export every known breaker's state at each collection (closed ones too, so a panel
        shows them at 0): ``read`` maps (model, pool) to closed, half_open or open."""

        def observe(_: CallbackOptions) -> Iterator[Observation]:
            for (model, pool), state in read().items():
                if state not in BREAKER_STATES:
                    raise ValueError(
                        f"state must be one of {', '.join(BREAKER_STATES)}, got {state!r}")
                yield Observation(BREAKER_STATES[state], {"model": model, "pool": pool})

        self.meter.create_observable_gauge(
            "timeshare.breaker.state", callbacks=[observe],
            description="0 closed, 1 half-open, 2 open")

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
        """Flush and detach readers (the Prometheus collectors are unregistered)."""
        if self._collector is not None:
            registry, collector = self._collector
            registry.unregister(collector)
            self._collector = None
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()
