"""Request traces: one span per stage of a request, built from times already measured.

Off (no ``telemetry.otlp_endpoint``) the ingress builds a plain :class:`router.pipeline.Pipeline`
and mounts nothing here: the request path creates no span, stage record or context value, and
makes no extra check. On, it builds a :class:`TracedPipeline`, which stamps the pipeline's own
clock at the stage boundaries of a sampled request and, once the request is answered, builds its
spans with explicit start and end times (OpenTelemetry's ``start_time``/``end_time``), so no span
is held open across an ``await``. The pool's stages come from the pool's reply (its measured
queue wait, swap-in and compute, and ``received_at``, the moment the replica took the work): the
pool's hot path does nothing for tracing, and nothing but the reply crosses from pool to router.

Spans (each carries ``timeshare.request_id`` and ``timeshare.model``; times from the ingress's
clock unless said otherwise):

- ``timeshare.request``: the root, arrival at the edge → the answer recorded; attributes
  ``priority``, ``caller``, ``served_by``, ``cache``, ``degraded``, ``route``.
- ``timeshare.edge``: arrival → the pipeline starts (body read, decode, edge admission).

  "Arrival" is the request's deadline start: a front proxy's ``X-Request-Start`` stamp when it
  has one (``router.front_stamp``), so both spans then also hold the wait in front of the edge.
- ``timeshare.route`` (routes only): the pipeline starts → the last model's answer
  (``strategy``, ``decision``); the per-model spans below are its children.
- ``timeshare.cache``, per model: the lookup (a hit: until the answer; a miss: until the chain
  starts, validation included); ``cache`` is the tier.
- ``timeshare.chain``, per model computed: the fallback chain (the pool call and any
  fallback); ``served_by``, ``degraded``, ``reason``, ``pool``.
- ``timeshare.pool.queue``, ``timeshare.pool.swap``, ``timeshare.pool.compute``: children of the
  chain, from the pool's reply: the scheduler queue wait, the swap-in (zero long when the model
  was resident) and compute, laid end to end from ``received_at`` and clamped into the chain's
  window (the replica's host clock may differ from the ingress's).
- ``timeshare.answer``: the chain's end (or the cache's answer) → recorded (cache fill, the
  response, the recorders).

Sampling is the Telemetry's (parent-based, ``telemetry.sample_ratio``); the caller's W3C
``traceparent`` is the parent: an HTTP header (:class:`TraceContextMiddleware`), gRPC metadata,
or a handle call's ``trace_context`` (``router.trace_context``). A request not sampled costs
one sampler call and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from fallbacks import Deadline, ModelAnswer, PoolName
from pool.work import PoolWork
from router.pipeline import Pipeline
from router.schemas import InferenceRequest, InferenceResponse
from router.trace_context import parent_of

__all__ = ["ModelStage", "RequestTrace", "RequestTracer", "TraceContextMiddleware",
           "TracedPipeline", "pool_stage_times"]

# The sampled request being answered, and the model call within it (a route runs several).
# Only TracedPipeline sets them; the context is copied into tasks the pipeline starts.
_TRACE: ContextVar[RequestTrace | None] = ContextVar("timeshare_trace", default=None)
_STAGE: ContextVar[ModelStage | None] = ContextVar("timeshare_stage", default=None)


@dataclass(slots=True)
class ModelStage:
    """One model's answer within a request, as stamped by :class:`TracedPipeline` (seconds of
    the pipeline's clock; ``chain_*`` and ``reply`` only when the answer was computed)."""

    model: str
    start: float
    end: float | None = None
    cache: str = "off"
    chain_start: float | None = None
    chain_end: float | None = None
    reply: ModelAnswer | None = None
    pool: str | None = None
    served_by: str | None = None
    degraded: bool = False
    reason: str | None = None


@dataclass(slots=True)
class RequestTrace:
    """A sampled request: its root span, the pipeline's start and its model stages.
    ``offset``: wall-clock minus pipeline clock, read once at the start."""

    root: Span
    request_id: str
    model: str
    arrival: float
    started: float
    offset: float
    stages: list[ModelStage] = field(default_factory=list)


def pool_stage_times(reply: ModelAnswer, chain_start: float, chain_end: float,
                     offset: float) -> tuple[tuple[float, float], ...]:
    """(start, end) of the pool's queue, swap and compute in the pipeline's clock: laid end to
    end from ``reply.received_at`` (wall clock, ``offset`` = wall - pipeline clock) and clamped
    into the chain's window; without ``received_at`` they end when the chain ends."""
    q, s, c = reply.queue_ms / 1e3, reply.swap_ms / 1e3, reply.compute_ms / 1e3
    total = q + s + c
    at = reply.received_at - offset if reply.received_at > 0 else chain_end - total
    at = max(chain_start, min(at, chain_end - total))
    return ((at, at + q), (at + q, at + q + s), (at + q + s, at + total))


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class RequestTracer:
    """Starts a sampled request's root span and builds its stage spans when it is answered.
    ``clock`` is the pipeline's, ``wall`` the epoch clock spans are stamped in."""

    def __init__(self, tracer: Tracer, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._tracer = tracer
        self._clock = clock
        self._wall = wall

    def begin(self, request: InferenceRequest, started: float) -> RequestTrace | None:
        """The trace of ``request`` (the pipeline starts at ``started``), or None when the
        sampler leaves it out. The parent is the one the request's ``trace_context`` names (a
        gRPC or handle call's), else the current OpenTelemetry context (HTTP's headers)."""
        offset = self._wall() - self._clock()
        arrival = request.arrival_s if request.arrival_s is not None else started
        root = self._tracer.start_span(
            "timeshare.request", context=parent_of(request.trace_context),
            start_time=_ns(arrival + offset),
            attributes={"timeshare.request_id": request.request_id,
                        "timeshare.model": request.model,
                        "timeshare.priority": request.priority.label,
                        "timeshare.caller": request.caller})
        if not root.is_recording():
            return None
        return RequestTrace(root, request.request_id, request.model, min(arrival, started),
                            started, offset)

    def finish(self, t: RequestTrace, response: InferenceResponse | None,
               error: BaseException | None, end: float) -> None:
        """Build the stage spans of ``t`` and end its root at ``end`` (pipeline clock)."""
        root = t.root
        parent = trace.set_span_in_context(root)
        self._span("timeshare.edge", parent, t, t.request_id, t.model, t.arrival, t.started)
        stages = list(t.stages)  # a background (shadow) call may still append
        answered = max((s.chain_end or s.end or t.started for s in stages), default=t.started)
        if response is not None and response.route is not None:
            r = response.route
            route = self._span("timeshare.route", parent, t, t.request_id, t.model, t.started,
                               answered, {"timeshare.strategy": r.strategy,
                                          "timeshare.decision": r.decision})
            parent = trace.set_span_in_context(route)
        for stage in stages:
            self._stage(parent, t, stage)
        self._span("timeshare.answer", trace.set_span_in_context(root), t, t.request_id,
                   t.model, answered, end)
        if response is not None:
            root.set_attributes({
                "timeshare.served_by": response.served_by, "timeshare.cache": response.cache,
                "timeshare.degraded": response.degraded,
                "timeshare.route": response.route.route if response.route else ""})
        if error is not None:
            root.set_status(Status(StatusCode.ERROR, type(error).__name__))
            root.set_attribute("error.type", type(error).__name__)
        root.end(end_time=_ns(end + t.offset))

    def _stage(self, parent: Any, t: RequestTrace, s: ModelStage) -> None:
        rid, end = t.request_id, s.end if s.end is not None else s.start
        cache_end = s.chain_start if s.chain_start is not None else end
        self._span("timeshare.cache", parent, t, rid, s.model, s.start, cache_end,
                   {"timeshare.cache": s.cache})
        if s.chain_start is None:
            return
        chain_end = s.chain_end if s.chain_end is not None else end
        attrs: dict[str, Any] = {"timeshare.degraded": s.degraded}
        for key, value in (("served_by", s.served_by), ("reason", s.reason), ("pool", s.pool)):
            if value is not None:
                attrs[f"timeshare.{key}"] = value
        chain = self._span("timeshare.chain", parent, t, rid, s.model, s.chain_start, chain_end,
                           attrs)
        if s.reply is None:  # rules or a default answered: no pool ran it
            return
        in_chain = trace.set_span_in_context(chain)
        pool = {"timeshare.pool": s.pool or ""}
        times = pool_stage_times(s.reply, s.chain_start, chain_end, t.offset)
        for name, (a, b) in zip(("queue", "swap", "compute"), times, strict=True):
            self._span(f"timeshare.pool.{name}", in_chain, t, rid, s.model, a, b, pool)

    def _span(self, name: str, parent: Any, t: RequestTrace, request_id: str, model: str,
              start: float, end: float, attrs: Mapping[str, Any] | None = None) -> Span:
        attributes = {"timeshare.request_id": request_id, "timeshare.model": model}
        if attrs:
            attributes.update(attrs)
        span = self._tracer.start_span(name, context=parent, start_time=_ns(start + t.offset),
                                       attributes=attributes)
        span.end(end_time=_ns(max(start, end) + t.offset))
        return span


class TracedPipeline(Pipeline):
    """The pipeline with its stages stamped for :class:`RequestTracer` (the ingress builds it
    instead of :class:`Pipeline` when spans are exported). Same answers, same errors."""

    def __init__(self, *args: Any, tracer: RequestTracer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tracer = tracer

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if _TRACE.get() is not None:  # already traced (a caller inside a traced request)
            return await super().infer(request)
        started = self._clock()
        t = self._tracer.begin(request, started)
        if t is None:
            return await super().infer(request)
        token = _TRACE.set(t)
        try:
            resp = await super().infer(request)
        except BaseException as e:
            self._tracer.finish(t, None, e, self._clock())
            raise
        finally:
            _TRACE.reset(token)
        self._tracer.finish(t, resp, None, self._clock())
        return resp

    async def stream(self, req: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        if _TRACE.get() is not None:  # infer() of a route: traced there
            async for resp in super().stream(req):
                yield resp
            return
        t = self._tracer.begin(req, self._clock())
        if t is None:
            async for resp in super().stream(req):
                yield resp
            return
        last: InferenceResponse | None = None
        error: BaseException | None = None
        token = _TRACE.set(t)
        try:
            async for resp in super().stream(req):
                last = resp
                yield resp
        except BaseException as e:
            error = e
            raise
        finally:
            try:
                _TRACE.reset(token)
            except ValueError:  # resumed in another context (a consumer that switched tasks)
                _TRACE.set(None)
            self._tracer.finish(t, last, error, self._clock())

    async def _answer(self, req: InferenceRequest, model: str, version: str | None,
                      start: float, **kwargs: Any) -> InferenceResponse:
        t = _TRACE.get()
        if t is None:
            return await super()._answer(req, model, version, start, **kwargs)
        stage = ModelStage(model, self._clock())
        t.stages.append(stage)
        token = _STAGE.set(stage)
        try:
            resp = await super()._answer(req, model, version, start, **kwargs)
        finally:
            _STAGE.reset(token)
            stage.end = self._clock()
        stage.cache = resp.cache
        return resp

    async def _run_chain(self, req: InferenceRequest, work: PoolWork, pool: PoolName,
                         deadline: Deadline) -> Any:
        stage = _STAGE.get()
        if stage is None:
            return await super()._run_chain(req, work, pool, deadline)
        stage.chain_start = self._clock()
        try:
            answer = await super()._run_chain(req, work, pool, deadline)
        finally:
            stage.chain_end = self._clock()
        stage.reply, stage.pool = answer.reply, answer.pool
        stage.served_by, stage.degraded, stage.reason = (answer.served_by, answer.degraded,
                                                         answer.reason)
        return answer


class TraceContextMiddleware:
    """ASGI middleware (outermost, mounted only when tracing): a request's W3C ``traceparent``
    / ``tracestate`` headers become the current OpenTelemetry context, so the request's trace
    continues the caller's and follows its sampling decision (parent-based)."""

    _HEADERS = frozenset({b"traceparent", b"tracestate"})

    def __init__(self, app: Any) -> None:
        self.app = app
        self._propagator = TraceContextTextMapPropagator()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        carrier = {}
        if scope["type"] == "http":
            for key, value in scope.get("headers", ()):
                if key in self._HEADERS:
                    carrier[key.decode("latin-1")] = value.decode("latin-1")
        if not carrier:
            await self.app(scope, receive, send)
            return
        token = otel_context.attach(self._propagator.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)
