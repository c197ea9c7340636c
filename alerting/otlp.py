"""Span export over OTLP (HTTP/protobuf), batched off the request path.

:func:`otlp_span_processor` is what the ingress gives its :class:`alerting.telemetry.Telemetry`
when ``telemetry.otlp_endpoint`` is set: an OpenTelemetry ``BatchSpanProcessor`` over an
``OTLPSpanExporter``. A finished span is only appended to the processor's queue on the request
path; a background thread exports batches. The queue is bounded (``max_queue_size``): when the
receiver is slow or down, spans past the bound are dropped (the SDK logs it), so tracing never
holds memory without bound nor slows serving.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

__all__ = ["otlp_span_processor"]


def otlp_span_processor(
    endpoint: str,
    *,
    max_queue_size: int = 2048,
    max_export_batch_size: int = 512,
    schedule_delay_ms: float = 1000.0,
    export_timeout_ms: float = 10_000.0,
) -> BatchSpanProcessor:
    """A batch processor exporting to ``endpoint`` (the receiver's full traces URL, e.g.
    ``http://127.0.0.1:4318/v1/traces``). At most ``max_queue_size`` spans wait for export
    (more are dropped); a batch of up to ``max_export_batch_size`` leaves every
    ``schedule_delay_ms`` or as soon as a batch is full; one export gives up after
    ``export_timeout_ms`` (retries included)."""
    if max_export_batch_size > max_queue_size:
        raise ValueError(f"max_export_batch_size ({max_export_batch_size}) must not exceed "
                         f"max_queue_size ({max_queue_size})")
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=export_timeout_ms / 1e3,
                                compression=Compression.NoCompression)
    return BatchSpanProcessor(exporter, max_queue_size=max_queue_size,
                              schedule_delay_millis=schedule_delay_ms,
                              max_export_batch_size=max_export_batch_size,
                              export_timeout_millis=export_timeout_ms)
