"""A caller's W3C trace context (``traceparent``, ``tracestate``), carried into a request.

A gRPC call's metadata (``router.grpc_v2.service``, :func:`from_metadata`) and a handle call
(:class:`router.client.TimeshareClient`, :func:`current_trace_context`: the caller's current
span) put it in the request's ``trace_context``; the traced pipeline starts the request's root
span in the context it names (:func:`parent_of`), so the request's trace is part of the
caller's and follows its sampling decision (parent-based). Over HTTP the headers become the
current context instead (``router.tracing.TraceContextMiddleware``, mounted only when tracing,
so a request's headers are not searched when it is off).

Only the OpenTelemetry API is imported here, so a client can use it without the tracing SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from router.schemas import TRACE_VALUE_MAX_CHARS

__all__ = ["current_trace_context", "from_metadata", "parent_of"]

_PROPAGATOR = TraceContextTextMapPropagator()


def parent_of(carrier: Mapping[str, str] | None) -> Context | None:
    """The OpenTelemetry context that ``carrier``'s ``traceparent`` names, to start a request's
    root span in; None without a ``traceparent`` (the current context is the parent). One that
    does not parse gives an empty context, as W3C asks: the request is then a root."""
    if not carrier or "traceparent" not in carrier:
        return None
    return _PROPAGATOR.extract(carrier)


def from_metadata(get: Callable[[str], object]) -> dict[str, str] | None:
    """A request's ``trace_context`` from a transport's headers or metadata (``get``: the
    value of a lower-case key, or None): the W3C fields that are strings within
    ``TRACE_VALUE_MAX_CHARS``; None without a usable ``traceparent``."""
    parent = get("traceparent")
    if not isinstance(parent, str) or len(parent) > TRACE_VALUE_MAX_CHARS:
        return None
    state = get("tracestate")
    if isinstance(state, str) and len(state) <= TRACE_VALUE_MAX_CHARS:
        return {"traceparent": parent, "tracestate": state}
    return {"traceparent": parent}


def current_trace_context() -> dict[str, str] | None:
    """The caller's current span as W3C fields, for a request's ``trace_context``; None when
    no valid span is current (nothing to continue)."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier or None
