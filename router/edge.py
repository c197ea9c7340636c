"""The front door: a pure ASGI middleware that decides before anything expensive happens.

Mounted around the HTTP app (``mount_edge``), it:

1. stamps the arrival time (``time.monotonic``) on every HTTP request's scope
   (``scope["timeshare.arrival_s"]``; :func:`arrival_s` reads it), so the deadline clock starts
   here and not once the pipeline sees the request; an infer request that a front proxy stamped
   ``X-Request-Start`` starts its clock at that stamp instead (``router.front_stamp``);
2. for inference POSTs only, refuses by ``Content-Length`` (413), reads the body with a total
   timeout and a minimum rate after a grace period (408), bounds how many connections may be
   reading a body at once separately from the work in flight (503), and follows the JSON nesting
   depth as chunks arrive (400 past ``max_json_depth``), all before any JSON decoding;
3. reads the priority class cheaply (header ``Timeshare-Priority``, else a bounded scan of the raw
   body's ``"priority"`` parameter, see ``router.edge_body``) and the deadline (header
   ``Timeshare-Deadline-Ms``, else ``"deadline_ms"``, else the app default), and asks
   ``policies.edge.decide_edge`` whether to let it through: overload sheds the lowest classes
   first, and a request that cannot meet its deadline given the measured queue delay is answered
   at once, 503 with ``Retry-After`` and the app's error shape ``{"error", "type", "field"}``.
   When both the class and the deadline come as headers, this is decided before the body is
   read (after the ``Content-Length`` checks): a refused request's body is never waited for.
   With ``shed_to_fallback`` a shed request goes on, marked, for its labelled cache hit or
   fallback, unless the ingress's own event loop is saturated (``router.loop_load``): then that
   answer would cost CPU that the admitted requests need, and it gets the 503.

Not covered here, said plainly: time spent in Ray Serve's proxy and its queue in front of the
ingress replica is before this code runs (bounded by the ingress's ``max_ongoing_requests`` and
``max_queued_requests``, see ``router.app``); it counts against the deadline only when something
in front stamps ``X-Request-Start`` (Serve's proxy does not).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from policies.edge import (
    EdgeConfig,
    admits_at_once,
    body_wait_s,
    decide_edge,
    fallback_affordable,
)
from policies.priority import Priority, parse_priority
from router._private.within import within
from router.edge_body import DepthScanner, sniff_deadline_ms, sniff_priority
from router.edge_state import EdgeState
from router.errors import Overloaded, ServiceUnavailable
from router.front_stamp import HEADER as REQUEST_START
from router.front_stamp import front_wait_s
from router.loop_load import LoopLoad
from router.schemas import InferenceRequest, InferenceResponse

__all__ = ["ADMITTED", "ARRIVAL_KEY", "USED_BACKEND_KEY", "EdgeGate", "EdgeMiddleware",
           "EdgeSettings", "EdgeState", "Verdict", "arrival_s", "mount_edge", "outside",
           "shed_reason", "used_the_backend"]

log = logging.getLogger("ray.serve")

ARRIVAL_KEY = "timeshare.arrival_s"
SHED_KEY = "timeshare.shed"
# Set by the infer handler once it has the answer: whether the backend computed it (False for a
# cache hit or a fallback's answer), so the edge's service time counts only the backend's work.
USED_BACKEND_KEY = "timeshare.used_backend"
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class InferHandler(Protocol):
    """Answers a plain v2 infer request from the body the edge read (``router.http_infer``):
    status, a fresh raw header list the edge adds its own to, and the body; the edge sends
    them."""

    def match(self, scope: Scope) -> tuple[str, str | None] | None: ...
    async def respond(self, scope: Scope, name: str, version: str | None, body: bytes
                      ) -> tuple[int, list[tuple[bytes, bytes]], bytes]: ...


class EdgeSettings(BaseModel):
    """The front door's limits (``edge:`` in the app settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="False = no edge at all (the behaviour before it): "
                                            "no arrival stamp, no limits, no shedding.")
    admission: EdgeConfig = Field(default_factory=EdgeConfig, description="policies.edge limits.")
    max_body_readers: int = Field(
        64, ge=1, description="Connections reading a body that did not arrive in one piece, at "
                              "once; more are refused (503). Separate from work in flight.")
    max_json_bytes: int = Field(
        8 << 20, gt=0, description="Largest JSON part (413 before decoding); bigger tensors use "
                                   "the binary tensor extension.")
    max_json_depth: int = Field(32, ge=2, description="Deepest JSON nesting (400 before decoding).")
    shed_to_fallback: bool = Field(
        True, description="A shed request goes on to the pipeline marked shed: answered at "
                          "once by a cache hit or its fallback chain's local steps (rules, "
                          "default), labelled, else 503 with Retry-After. False: 503 at the "
                          "edge without decoding.")
    fallback_max_loop_busy: float = Field(
        0.8, gt=0, le=1, description="With shed_to_fallback: once the ingress's event loop thread "
                                     "is busier than this share of a core (its own CPU is the "
                                     "bottleneck), shed requests get 503 with Retry-After "
                                     "instead of a fallback answer, which costs about half a "
                                     "model answer's CPU (policies.edge.fallback_affordable).")
    initial_service_s: float = Field(
        0.02, gt=0, description="Seconds per request assumed until the first measurement.")
    ingress_max_ongoing_requests: int = Field(
        128, ge=1, description="Ray Serve max_ongoing_requests of the ingress: work in flight "
                               "plus body readers plus headroom.")
    ingress_max_queued_requests: int = Field(
        64, ge=-1, description="Ray Serve max_queued_requests of the ingress (-1 = unbounded); "
                               "past it Ray's proxy answers 503 at once.")
    request_start: bool = Field(
        True, description="Start an infer request's deadline at its front proxy's "
                          "X-Request-Start stamp when it has one (router.front_stamp): the wait "
                          "in front of the edge counts against the deadline. Needs the front's "
                          "clock synchronised with this host's.")
    request_start_max_age_s: float = Field(
        30.0, gt=0, description="An X-Request-Start stamp older than this is ignored (a wrong "
                                "unit or a broken clock), not held against the request.")


def arrival_s(scope: Scope) -> float | None:
    """The arrival time the edge stamped on this request's scope (``time.monotonic``)."""
    return scope.get(ARRIVAL_KEY)


def shed_reason(scope: Scope) -> str | None:
    """Why the edge shed this request (it then gets only its cache hit or local fallback)."""
    return scope.get(SHED_KEY)


async def _respond(send: Send, status: int, error: str, type_: str, field: str | None,
                   retry_after: int | None = None) -> None:
    body: dict[str, Any] = {"error": error, "type": type_}
    if field is not None:
        body["field"] = field
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


class _Refused(Exception):
    def __init__(self, status: int, error: str, type_: str, field: str | None) -> None:
        super().__init__(error)
        self.args4 = (status, error, type_, field)


def _with_retry_after(send: Send, seconds: int) -> Send:
    """``send`` that adds ``Retry-After`` to a 503 (a shed request with no fallback)."""

    async def wrapped(msg: Message) -> None:
        if msg["type"] == "http.response.start" and msg.get("status") == 503:
            msg = {**msg, "headers": [*msg.get("headers", ()),
                                      (b"retry-after", str(seconds).encode())]}
        await send(msg)

    return wrapped


# The request headers the edge reads, found in one pass over the raw list (the first of each)
_EDGE_HEADERS = frozenset({b"content-length", b"inference-header-content-length",
                           b"timeshare-priority", b"x-priority", b"timeshare-deadline-ms",
                           REQUEST_START})


def _edge_headers(scope: Scope) -> dict[bytes, str]:
    found: dict[bytes, str] = {}
    for k, v in scope.get("headers", ()):
        if k in _EDGE_HEADERS and k not in found:
            found[k] = v.decode("latin-1")
    return found


def _is_infer(scope: Scope) -> bool:
    path = scope.get("path", "")
    return (scope.get("method") == "POST" and path.startswith("/v2/models/")
            and path.endswith(("/infer", "/infer_stream")))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The edge's answer to one request: go on (:data:`ADMITTED`); go on marked shed
    (``shed_reason``: only its cache hit or local fallback answers it, labelled); or refused
    (``refused``: the message, answered at once as overloaded, retry after ``retry_after_s``)."""

    shed_reason: str | None = None
    refused: str | None = None
    retry_after_s: int = 1


ADMITTED = Verdict()


class EdgeGate:
    """The edge's admission: one state (work in flight, service time) and one loop-load measure
    per ingress replica, shared by every front door (the HTTP edge, the gRPC service), so all of
    them feed and read the same admission model."""

    def __init__(self, settings: EdgeSettings, *, clock: Callable[[], float] = time.monotonic,
                 loop_load: LoopLoad | None = None,
                 on_refused: Callable[[Priority], None] | None = None) -> None:
        self.settings = settings
        self.clock = clock
        self._on_refused = on_refused  # a request refused here never reaches the pipeline's
        # recorders: the status views' per-class shed count hears of it from this
        self.state = EdgeState(initial_service_s=settings.initial_service_s, clock=clock,
                               standing_window_s=settings.admission.standing_window_s)
        self.loop_load = loop_load or LoopLoad()

    def decide(self, priority: Priority, *, elapsed_s: float, deadline_s: float) -> Verdict:
        """Admit, shed to the fallback, or refuse one request (``policies.edge``); a caller
        that admits it brackets the work with ``state.started`` / ``state.finished``."""
        cfg = self.settings.admission
        st = self.state
        if admits_at_once(total=st.total, service_s=st.service_s, priority=priority,
                          elapsed_s=elapsed_s, deadline_s=deadline_s, config=cfg):
            return ADMITTED
        decision = decide_edge(st.snapshot(), priority=priority, elapsed_s=elapsed_s,
                               deadline_s=deadline_s, config=cfg)
        if decision.admit:
            return ADMITTED
        st.count(f"shed:{priority.label}")
        why = (f"{decision.reason}: predicted queue delay "
               f"{decision.predicted_delay_s * 1e3:.0f} ms")
        if not self.settings.shed_to_fallback or not fallback_affordable(
                loop_busy=self.loop_load.busy,
                max_loop_busy=self.settings.fallback_max_loop_busy):
            if self._on_refused is not None:
                self._on_refused(priority)
            return Verdict(refused=f"{why}; retry later", retry_after_s=decision.retry_after_s)
        return Verdict(shed_reason=f"shed at the edge: {why}",
                       retry_after_s=decision.retry_after_s)

    def _verdict(self, request: InferenceRequest, *, elapsed_s: float,
                 deadline_s: float) -> Verdict:
        """:meth:`decide` for a decoded request: raises the refusal, marks a shed request."""
        self.loop_load.touch()
        verdict = self.decide(request.priority, elapsed_s=elapsed_s, deadline_s=deadline_s)
        if verdict.refused is not None:
            raise Overloaded(verdict.refused, field="priority",
                             retry_after_s=verdict.retry_after_s)
        if verdict is not ADMITTED:
            request.shed_reason = verdict.shed_reason
        return verdict

    async def run(self, request: InferenceRequest, *, elapsed_s: float, deadline_s: float,
                  answer: Callable[[InferenceRequest], Awaitable[InferenceResponse]]
                  ) -> InferenceResponse:
        """One decoded request through the gate (the gRPC service and the handle API; the HTTP
        edge brackets the ASGI app itself): refused raises :class:`Overloaded`; shed goes on
        marked (``request.shed_reason``) for its cache hit or local fallback; admitted is
        counted in flight while ``answer`` runs, and its answer teaches the service time when
        the backend computed it."""
        verdict = self._verdict(request, elapsed_s=elapsed_s, deadline_s=deadline_s)
        if verdict is not ADMITTED:
            try:
                return await answer(request)
            except ServiceUnavailable as e:  # no local fallback: the shed's own 503
                raise _overloaded(e, verdict) from None
        started = self.clock()
        self.state.started(request.priority, started)
        used_backend = True  # an error: counted as before
        try:
            response = await answer(request)
            used_backend = used_the_backend(response)
            return response
        finally:
            self.state.finished(request.priority, started, used_backend=used_backend)

    async def stream(self, request: InferenceRequest, *, elapsed_s: float, deadline_s: float,
                     answers: Callable[[InferenceRequest], AsyncIterator[InferenceResponse]]
                     ) -> AsyncIterator[InferenceResponse]:
        """:meth:`run` for a call with several answers (a fast-then-refine route): admitted, it
        is in flight until its last answer."""
        verdict = self._verdict(request, elapsed_s=elapsed_s, deadline_s=deadline_s)
        if verdict is not ADMITTED:
            try:
                async for response in answers(request):
                    yield response
            except ServiceUnavailable as e:
                raise _overloaded(e, verdict) from None
            return
        started = self.clock()
        self.state.started(request.priority, started)
        used_backend = True
        try:
            async for response in answers(request):
                used_backend = used_the_backend(response)
                yield response
        finally:
            self.state.finished(request.priority, started, used_backend=used_backend)


def used_the_backend(response: InferenceResponse) -> bool:
    """Whether the backend computed this answer (a model ran: its compute time is set), so its
    completion is a service-time sample; a cache hit or a fallback's answer is not."""
    return response.timings.compute_ms > 0


def _overloaded(e: ServiceUnavailable, verdict: Verdict) -> Overloaded:
    """A shed request with no local fallback: its 503, with the edge's retry hint."""
    return Overloaded(e.message, field="priority", retry_after_s=verdict.retry_after_s)


class EdgeMiddleware:
    """Pure ASGI middleware; see the module docstring. ``max_body_bytes``: the app's limit;
    ``gate``: the replica's shared admission (a private one when not given)."""

    def __init__(self, app: ASGIApp, *, settings: EdgeSettings, max_body_bytes: int,
                 default_deadline_ms: float, clock: Callable[[], float] = time.monotonic,
                 infer: InferHandler | None = None, loop_load: LoopLoad | None = None,
                 gate: EdgeGate | None = None,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.app = app
        self.wall_clock = wall_clock  # Unix time, for a front proxy's X-Request-Start
        self.infer = infer
        self.settings = settings
        self.max_body_bytes = max_body_bytes
        self.default_deadline_s = default_deadline_ms / 1000.0
        self.clock = clock
        self.gate = gate if gate is not None else EdgeGate(settings, clock=clock,
                                                           loop_load=loop_load)
        self.state = self.gate.state
        self.loop_load = self.gate.loop_load

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.settings.enabled or ARRIVAL_KEY in scope:
            # off: the deadline starts in the pipeline; stamped: an outer edge (the listener's,
            # ``outside``) has already admitted this request, and must not count it twice
            await self.app(scope, receive, send)
            return
        arrived = self.clock()
        scope[ARRIVAL_KEY] = arrived
        if not _is_infer(scope):
            await self.app(scope, receive, send)
            return
        self.loop_load.touch()
        headers = _edge_headers(scope)
        # the deadline's start: arrival here, or earlier by the front proxy's stamp (the wait
        # in front of the edge counts against it); the body's read and Server-Timing's
        # ``edge`` run from arrival here
        start = arrived - self._front_wait_s(headers)
        if start != arrived:
            scope[ARRIVAL_KEY] = start
        try:
            json_limit = self._sizes(headers)
            known = self._from_headers(headers)
            body: bytes | None = None
            if known is None:  # the class or the deadline is in the body
                body = await self._read(headers, receive, arrived, json_limit)
                known = self._priority(headers, body), self._deadline_s(headers, body)
            priority, deadline_s = known
            verdict = self.gate.decide(priority, elapsed_s=self.clock() - start,
                                       deadline_s=deadline_s)
            if body is None:  # both came as headers: decided before the body is read, so a
                # refusal never waits for it (behind Serve's proxy it is a call back to the
                # proxy) nor reads a large one
                body = (b"" if verdict.refused is not None
                        else await self._read(headers, receive, arrived, json_limit))
        except _Refused as r:
            self.state.count(f"refused:{r.args4[0]}")
            await _respond(send, *r.args4)
            return
        if verdict is ADMITTED:
            await self._forward(scope, receive, send, body, priority, arrived)
        elif verdict.refused is not None:
            await _respond(send, 503, verdict.refused, "Overloaded", "priority",
                           verdict.retry_after_s)
        else:
            scope[SHED_KEY] = verdict.shed_reason
            await self._app(scope, body, receive,
                            _with_retry_after(send, verdict.retry_after_s), arrived)

    def _front_wait_s(self, headers: dict[bytes, str]) -> float:
        """The wait in front of the edge by the request's ``X-Request-Start`` stamp, 0 without
        one (or when the settings ignore it); an unusable stamp is counted and ignored."""
        raw = headers.get(REQUEST_START)
        if raw is None or not self.settings.request_start:
            return 0.0
        wait = front_wait_s(raw, now_s=self.wall_clock(),
                            max_age_s=self.settings.request_start_max_age_s)
        if wait is None:
            if "request_start:ignored" not in self.state.counts:  # once: a front's setting
                log.warning("X-Request-Start %r ignored: not a Unix time, or older than %s s "
                            "(edge.request_start_max_age_s); later ones are only counted "
                            "(/v2/status: ingress.replicas.<replica>.edge)", raw[:40],
                            self.settings.request_start_max_age_s)
            self.state.count("request_start:ignored")
            return 0.0
        return wait

    async def _forward(self, scope: Scope, receive: Receive, send: Send, body: bytes,
                       priority: Priority, arrived: float) -> None:
        started = self.clock()
        self.state.started(priority, started)
        try:
            await self._app(scope, body, receive, send, arrived)
        finally:
            self.state.finished(priority, started,
                                used_backend=scope.get(USED_BACKEND_KEY, True))

    async def _app(self, scope: Scope, body: bytes, receive: Receive, send: Send,
                   arrived: float) -> None:
        """The app, with the body already read replayed to it; a plain infer request goes
        straight to the ``infer`` handler with the body (no routing, no replay), and the edge
        sends its answer itself: no closure around ``send`` per request."""
        target = self.infer.match(scope) if self.infer is not None else None
        if target is not None:
            assert self.infer is not None
            status, headers, payload = await self.infer.respond(scope, target[0], target[1],
                                                                body)
            headers.append((b"server-timing", self._timing(arrived)))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload, "more_body": False})
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def timed(msg: Message) -> None:
            if msg["type"] == "http.response.start":
                dur = self._timing(arrived)
                headers = msg.get("headers")  # appended in place, as Starlette's MutableHeaders
                if isinstance(headers, list):  # does: the sender built this message for us
                    headers.append((b"server-timing", dur))
                else:
                    msg = {**msg, "headers": [*(headers or ()), (b"server-timing", dur)]}
            await send(msg)

        await self.app(scope, replay, timed)

    def _timing(self, arrived: float) -> bytes:
        """``Server-Timing`` value: the time spent from arrival, so a client can tell it apart
        from the hops in front of the edge (Ray's proxy)."""
        return f"edge;dur={(self.clock() - arrived) * 1e3:.2f}".encode()

    def _priority(self, headers: dict[bytes, str], body: bytes) -> Priority:
        raw = headers.get(b"timeshare-priority") or headers.get(b"x-priority")
        if raw is not None:
            try:
                return parse_priority(int(raw) if _decimal(raw.strip()) is not None else raw)
            except ValueError as e:
                raise _Refused(400, f"Timeshare-Priority: {e}", "InvalidRequest",
                               "Timeshare-Priority") from None
        found = sniff_priority(body)  # not `or`: REALTIME is 0, which is falsy
        return found if found is not None else Priority.default()

    def _deadline_s(self, headers: dict[bytes, str], body: bytes) -> float:
        ms = _header_deadline_ms(headers)
        ms = ms if ms is not None else sniff_deadline_ms(body)
        return ms / 1000.0 if ms else self.default_deadline_s

    def _from_headers(self, headers: dict[bytes, str]) -> tuple[Priority, float] | None:
        """The class and the deadline (s) when both came as headers (the body's are then not
        read: the headers win), else None."""
        if not (headers.get(b"timeshare-priority") or headers.get(b"x-priority")):
            return None
        ms = _header_deadline_ms(headers)
        return None if ms is None else (self._priority(headers, b""), ms / 1000.0)

    def _sizes(self, headers: dict[bytes, str]) -> int:
        """The size limits the headers alone can break (413), before anything else; returns
        how much of the body is JSON at most (binary tensor data follows it)."""
        limit = self.max_body_bytes
        length = _decimal(headers.get(b"content-length"))
        if length is not None and length > limit:
            raise _Refused(413, f"body: {length} bytes exceeds the limit of {limit}",
                           "PayloadTooLarge", "body")
        hl = _decimal(headers.get(b"inference-header-content-length"))
        json_len = hl if hl is not None else length
        cap = self.settings.max_json_bytes
        if json_len is not None and json_len > cap:
            raise _Refused(413, f"body: a JSON part over {cap} bytes; send large tensors "
                                "with the binary tensor extension", "PayloadTooLarge", "body")
        # only the JSON part is scanned for depth (binary tensor data follows it); a malformed
        # header value is the HTTP layer's to reject, naming the header
        return hl if hl is not None else limit

    async def _read(self, headers: dict[bytes, str], receive: Receive, arrived: float,
                    json_limit: int) -> bytes:
        """The whole body, or :class:`_Refused` (413 size, 400 depth, 408 slow, 503 readers);
        ``json_limit``: :meth:`_sizes`'s."""
        limit, cap = self.max_body_bytes, self.settings.max_json_bytes
        scanner = DepthScanner(self.settings.max_json_depth)
        chunks: list[bytes] = []
        size = 0
        reading = False
        try:
            while True:
                msg = await self._next(receive, size, arrived)
                if msg["type"] == "http.disconnect":
                    raise _Refused(400, "body: client disconnected", "InvalidRequest", "body")
                chunk = msg.get("body", b"")
                part = chunk[: json_limit - size]
                last = not msg.get("more_body", False) or len(part) < len(chunk)
                if size < json_limit and not scanner.feed(part, last=last):
                    raise _Refused(400, f"body: JSON nested deeper than "
                                        f"{self.settings.max_json_depth}", "InvalidRequest", "body")
                size += len(chunk)
                if size > limit or (json_limit == limit and size > cap):
                    raise _Refused(413, f"body: exceeds the limit of {min(limit, cap)} bytes",
                                   "PayloadTooLarge", "body")
                chunks.append(chunk)
                if not msg.get("more_body", False):
                    return b"".join(chunks)
                if not reading:  # did not arrive in one piece: needs a reader slot
                    if self.state.readers >= self.settings.max_body_readers:
                        raise _Refused(503, "body: too many slow uploads at once; retry later",
                                       "ServiceUnavailable", "body")
                    reading = True
                    self.state.readers += 1
        finally:
            if reading:
                self.state.readers -= 1

    async def _next(self, receive: Receive, received: int, arrived: float) -> Message:
        wait = body_wait_s(received=received, elapsed_s=self.clock() - arrived,
                           config=self.settings.admission)
        if wait <= 0:
            raise _Refused(408, f"body: arrived too slowly ({received} bytes so far)",
                           "RequestTimeout", "body")
        try:  # the timer is armed only if the bytes are not there yet (router._private.within)
            return await within(receive(), wait)
        except TimeoutError:
            raise _Refused(408, f"body: arrived too slowly ({received} bytes so far)",
                           "RequestTimeout", "body") from None


def mount_edge(app: Any, *, settings: EdgeSettings, max_body_bytes: int,
               default_deadline_ms: float, infer: InferHandler | None = None,
               gate: EdgeGate | None = None) -> Any:
    """Wrap a Starlette/FastAPI ``app`` with the edge (outermost), in place; returns ``app``.
    ``infer``: answers plain v2 infer requests without the app's routing (see the handler);
    ``gate``: the admission shared with the replica's other front doors."""
    app.add_middleware(EdgeMiddleware, settings=settings, max_body_bytes=max_body_bytes,
                       default_deadline_ms=default_deadline_ms, infer=infer, gate=gate)
    return app


def outside(app: Any) -> Any:
    """The edge ``mount_edge`` put in ``app``'s middleware, again in front of the whole app: a
    plain infer request is answered without passing Starlette's and FastAPI's middleware layers
    (the error handler, the body limit, the telemetry; the infer handler keeps its own error
    shape), and anything else reaches ``app`` stamped, so its inner edge lets it through. The
    same settings, infer handler and gate: one admission. The listener serves this; Serve's
    ingress keeps ``app`` (it reads its routes)."""
    for m in app.user_middleware:
        if m.cls is EdgeMiddleware:
            return EdgeMiddleware(app, *m.args, **m.kwargs)
    raise ValueError("outside: mount_edge was not applied to this app")


def _header_deadline_ms(headers: dict[bytes, str]) -> float | None:
    """``Timeshare-Deadline-Ms`` when it is a positive number, else None (a malformed one is not
    ours to reject here: the body's parameter, or the pipeline's default, wins)."""
    raw = headers.get(b"timeshare-deadline-ms")
    if raw is None:
        return None
    try:
        ms = float(raw)
    except ValueError:
        return None
    return ms if ms > 0 else None


def _decimal(text: str | None) -> int | None:
    """An ASCII decimal header value, else None (``str.isdigit`` also accepts '²')."""
    return int(text) if text is not None and text.isascii() and text.isdigit() else None
