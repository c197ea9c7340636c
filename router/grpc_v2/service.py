"""``inference.GRPCInferenceService`` (the Open Inference Protocol over gRPC) over a ``Frontend``.

Every call enters the request path the HTTP API uses: the same ``Frontend`` (the ingress), the
same ``InferenceRequest`` built by ``router.http_infer.request_from_v2`` from the same decoded
shape, the same admission (the replica's shared ``router.edge.EdgeGate``), then the pipeline's
validation, cache, chain and call log. Only the wire differs.

- The call's gRPC deadline, less ``grpc.deadline_margin_ms`` for the way back, is the request's
  deadline (a ``deadline_ms`` / ``timeout`` parameter may only shorten it), counted from arrival
  here, or from a front proxy's ``x-request-start`` stamp (``grpc.request_start``, as HTTP's
  ``X-Request-Start``: the wait in front counts); a chain that has a fallback answers
  within it, labelled, else the call ends ``DEADLINE_EXCEEDED``.
- A client that cancels cancels the handler's task, and with it the pipeline's work (the pool
  call is cancelled too): nothing keeps running for an answer nobody reads.
- Errors are status codes, never ``UNKNOWN``, and ``INTERNAL`` only for a bug of ours:
  ``INVALID_ARGUMENT`` (bad input, including a body that is not the method's protobuf message),
  ``NOT_FOUND``, ``UNAUTHENTICATED`` / ``PERMISSION_DENIED`` (keys travel as metadata
  ``authorization: Bearer KEY`` or ``x-api-key``), ``RESOURCE_EXHAUSTED`` (over a quota, or a
  message over the size limit, refused by gRPC before it is decoded), ``UNAVAILABLE`` (shed or
  overloaded) and ``DEADLINE_EXCEEDED``. The message names the field and the trailing metadata
  carries ``timeshare-field``; ``UNAVAILABLE`` and ``RESOURCE_EXHAUSTED`` carry ``retry-after``
  (whole seconds, as HTTP's header).
- A call's ``traceparent`` / ``tracestate`` metadata (W3C Trace Context, as OpenTelemetry's
  gRPC instrumentation sends it) is the request's ``trace_context``: with tracing on, the
  request's trace continues the caller's. A stream's metadata is every one of its requests'.
- ``ModelStreamInfer`` (Triton's bidirectional stream, what ``tritonclient.grpc``'s
  ``start_stream`` / ``async_stream_infer`` call): every request on the stream is one request of
  the same path, run concurrently with the others (at most ``stream_max_in_flight`` per stream;
  past that the stream stops reading until one finishes). Each answer goes back as it comes, so
  a fast-then-refine route streams its fast answer, then the refined one, as over HTTP SSE; the
  parameter ``triton_final_response`` marks the last answer of a request. A request's error
  travels in-band (``error_message``, naming the field; the stream goes on), as Triton does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from router.edge import EdgeGate
from router.errors import (
    DeadlineExceeded,
    Forbidden,
    InvalidRequest,
    ModelNotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServiceUnavailable,
    TimeshareError,
    Unauthorized,
)
from router.front_stamp import front_wait_s
from router.frontend import Frontend
from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb
from router.grpc_v2.codec import decode_model_infer, encode_model_infer, metadata_response
from router.http_infer import check_name, presented_key, request_from_v2
from router.schemas import InferenceRequest
from router.trace_context import from_metadata
from router.v2 import DecodedRequest

__all__ = ["SERVICE", "InferenceService", "STATUS_CODES"]

log = logging.getLogger("ray.serve")

SERVICE = "inference.GRPCInferenceService"
STATUS_CODES: dict[type[TimeshareError], grpc.StatusCode] = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    ModelNotFound: grpc.StatusCode.NOT_FOUND,
    PayloadTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
    Forbidden: grpc.StatusCode.PERMISSION_DENIED,
    QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ServiceUnavailable: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
}
_RETRY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)


class _Malformed:
    """What the lenient deserializer returns for bytes that are not the method's message."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


def _lenient(message: type[Any]) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except (DecodeError, ValueError) as e:
            return _Malformed(f"body: not a valid {message.DESCRIPTOR.full_name} ({e})")
    return parse


async def _abort(context: grpc.aio.ServicerContext, e: TimeshareError,
                 retry_after_s: int | None = None) -> None:
    code = STATUS_CODES.get(type(e)) or next(
        (c for t, c in STATUS_CODES.items() if isinstance(e, t)), grpc.StatusCode.INTERNAL)
    trailing: list[tuple[str, str]] = [("timeshare-error", type(e).__name__)]
    if e.field is not None:
        trailing.append(("timeshare-field", e.field))
    if code in _RETRY:
        trailing.append(("retry-after", str(retry_after_s or getattr(e, "retry_after_s", 1))))
    await context.abort(code, e.message, trailing_metadata=tuple(trailing))


class InferenceService:
    """The service's methods; :meth:`handler` registers them on a ``grpc.aio`` server.

    ``gate``: the replica's shared admission (None: no edge, as ``edge.enabled: false``);
    ``default_deadline_ms``: the app's, for admission of a call that names none;
    ``deadline_margin_ms``: taken off the gRPC deadline for the answer's way back;
    ``request_start_max_age_s``: honour a front proxy's ``x-request-start`` stamp up to this
    age (None: ignore it, ``grpc.request_start: false``);
    ``stream_max_in_flight``: requests of one ``ModelStreamInfer`` stream run at once.
    """

    def __init__(self, front: Frontend, *, gate: EdgeGate | None, default_deadline_ms: float,
                 deadline_margin_ms: float = 20.0, stream_max_in_flight: int = 64,
                 request_start_max_age_s: float | None = 30.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.front = front
        self.gate = gate
        self.default_deadline_ms = default_deadline_ms
        self.deadline_margin_ms = deadline_margin_ms
        self.request_start_max_age_s = request_start_max_age_s
        self.stream_max_in_flight = stream_max_in_flight
        self.clock = clock
        self.wall_clock = wall_clock  # Unix time, for a front proxy's x-request-start
        self.ongoing = 0  # ModelInfer calls in flight, for Serve's autoscaler (one loop: no lock)
        self.stamps_ignored = 0  # x-request-start stamps that did not parse or were too old

    def handler(self) -> grpc.GenericRpcHandler:
        methods: dict[str, tuple[Callable[..., Awaitable[Any]], type[Any], type[Any]]] = {
            "ServerLive": (self.server_live, pb.ServerLiveRequest, pb.ServerLiveResponse),
            "ServerReady": (self.server_ready, pb.ServerReadyRequest, pb.ServerReadyResponse),
            "ModelReady": (self.model_ready, pb.ModelReadyRequest, pb.ModelReadyResponse),
            "ServerMetadata": (self.server_metadata, pb.ServerMetadataRequest,
                               pb.ServerMetadataResponse),
            "ModelMetadata": (self.model_metadata, pb.ModelMetadataRequest,
                              pb.ModelMetadataResponse),
            "ModelInfer": (self.model_infer, pb.ModelInferRequest, pb.ModelInferResponse),
        }
        handlers: dict[str, grpc.RpcMethodHandler] = {
            name: grpc.unary_unary_rpc_method_handler(
                self._guarded(fn), request_deserializer=_lenient(req),
                response_serializer=resp.SerializeToString)
            for name, (fn, req, resp) in methods.items()}
        handlers["ModelStreamInfer"] = grpc.stream_stream_rpc_method_handler(
            self.model_stream_infer, request_deserializer=_lenient(pb.ModelInferRequest),
            response_serializer=pb.ModelStreamInferResponse.SerializeToString)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    def _guarded(self, fn: Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
                 ) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
        """``fn`` with the error mapping: typed errors to status codes, a bug to INTERNAL."""

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                if isinstance(request, _Malformed):
                    raise InvalidRequest(request.message, field="body")
                return await fn(request, context)
            except TimeshareError as e:
                await _abort(context, e)
            except Exception as e:  # a bug of ours: INTERNAL, never a crash of the server
                log.exception("unhandled error in %s", getattr(fn, "__name__", fn))
                await context.abort(grpc.StatusCode.INTERNAL,
                                    f"internal error ({type(e).__name__})")
        return call

    # -- health and metadata --------------------------------------------------------------------
    async def server_live(self, request: pb.ServerLiveRequest,
                          context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, request: pb.ServerReadyRequest,
                           context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(
            ready=any(e.ready for e in self.front.live_models().values()))

    async def model_ready(self, request: pb.ModelReadyRequest,
                          context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        """Ready or not, as HTTP's ``/ready`` (an unknown model is not ready)."""
        name, version = request.name, request.version or None
        check_name("name", name)
        check_name("version", version)
        try:
            await self.front.model_ready(name, version)
        except TimeshareError:
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=True)

    async def server_metadata(self, request: pb.ServerMetadataRequest,
                              context: grpc.aio.ServicerContext) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="timeshare", version="0.1.0",
                                         extensions=["model_repository", "timeshare_status"])

    async def model_metadata(self, request: pb.ModelMetadataRequest,
                             context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        if not request.name:
            raise InvalidRequest("name: expected a model or route name", field="name")
        check_name("name", request.name)
        check_name("version", request.version or None)
        return metadata_response(await self.front.model_metadata(request.name,
                                                                 request.version or None))

    # -- inference ------------------------------------------------------------------------------
    async def model_infer(self, request: pb.ModelInferRequest,
                          context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        self.ongoing += 1
        try:
            return await self._infer(request, context)
        finally:
            self.ongoing -= 1

    def _accept(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext,
                arrived: float, *, stamped: bool = True
                ) -> tuple[DecodedRequest, bool, InferenceRequest, float]:
        """Decode and check one call's request: the same ``InferenceRequest`` as HTTP's, and
        when its deadline starts (arrival here, or earlier by a front proxy's stamp when
        ``stamped``: a unary call's metadata is its request's)."""
        metadata = {k: v for k, v in context.invocation_metadata() or ()
                    if isinstance(v, str)}
        wait_s = self._front_wait_s(metadata.get("x-request-start")) if stamped else 0.0
        start = arrived - wait_s
        remaining = context.time_remaining()  # None: the caller set no gRPC deadline
        # counted from ``start``: a front that forwards the caller's gRPC timeout as it came
        # leaves the wait in front out of it
        budget_ms = None if remaining is None else remaining * 1e3 - self.deadline_margin_ms
        if budget_ms is not None and budget_ms - wait_s * 1e3 <= 0:
            raise DeadlineExceeded("deadline: the call's gRPC deadline leaves no time to answer",
                                   field="deadline")
        name, version = request.model_name, request.model_version or None
        if not name:
            raise InvalidRequest("model_name: expected a model or route name", field="model_name")
        check_name("model_name", name)
        check_name("model_version", version)
        decoded, raw = decode_model_infer(request)
        req = request_from_v2(name, version, decoded, caller_key=presented_key(metadata),
                              arrival_s=start, max_deadline_ms=budget_ms,
                              trace_context=from_metadata(metadata.get))
        return decoded, raw, req, start

    def _front_wait_s(self, raw: str | None) -> float:
        """The wait in front of this server by a call's ``x-request-start`` stamp; 0 without
        one, or when ``grpc.request_start`` is off. An unusable stamp is ignored: logged once,
        counted (``stamps_ignored``, and in ``/v2/status`` beside the HTTP edge's counts as
        ``grpc_request_start:ignored``)."""
        if raw is None or self.request_start_max_age_s is None:
            return 0.0
        wait = front_wait_s(raw, now_s=self.wall_clock(), max_age_s=self.request_start_max_age_s)
        if wait is None:
            if not self.stamps_ignored:  # once: a front's setting, not a request's fault
                log.warning("x-request-start %r ignored: not a Unix time, or older than %s s "
                            "(grpc.request_start_max_age_s); later ones are only counted",
                            raw[:40], self.request_start_max_age_s)
            self.stamps_ignored += 1
            if self.gate is not None:
                self.gate.state.count("grpc_request_start:ignored")
            return 0.0
        return wait

    async def _infer(self, request: pb.ModelInferRequest,
                     context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        decoded, raw, req, start = self._accept(request, context, self.clock())
        if self.gate is None:
            response = await self.front.answer(req)
        else:
            response = await self.gate.run(
                req, elapsed_s=self.clock() - start,
                deadline_s=(req.deadline_ms or self.default_deadline_ms) / 1e3,
                answer=self.front.answer)
        return encode_model_infer(response, decoded, raw=raw)

    # -- streaming inference ----------------------------------------------------------------
    async def model_stream_infer(self, requests: AsyncIterator[Any],
                                 context: grpc.aio.ServicerContext
                                 ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Triton's ``ModelStreamInfer``: answers in the order they are ready, errors in-band.

        A client that cancels (or whose stream deadline passes) closes this generator: the
        ``finally`` cancels every request of the stream still running, and with it its pool
        call."""
        out: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        slots = asyncio.Semaphore(self.stream_max_in_flight)
        running: set[asyncio.Task[None]] = set()

        async def one(request: Any) -> None:
            try:
                async for answer in self._stream_one(request, context):
                    out.put_nowait(pb.ModelStreamInferResponse(infer_response=answer))
            except TimeshareError as e:
                out.put_nowait(_stream_error(request, e.message))
            except Exception as e:  # a bug of ours: this request's error, the stream goes on
                log.exception("unhandled error in ModelStreamInfer")
                out.put_nowait(_stream_error(request, f"internal error ({type(e).__name__})"))
            finally:
                slots.release()

        async def read() -> None:
            async for request in requests:
                await slots.acquire()
                task = asyncio.get_running_loop().create_task(one(request))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:  # the client half-closed: answer what it sent, then end
                await asyncio.wait(set(running))

        reader = asyncio.get_running_loop().create_task(read())
        reader.add_done_callback(lambda _: out.put_nowait(None))  # read done or failed: the end
        try:
            while (item := await out.get()) is not None:
                yield item
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                raise reader.exception()  # type: ignore[misc]
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()

    async def _stream_one(self, request: Any, context: grpc.aio.ServicerContext
                          ) -> AsyncIterator[pb.ModelInferResponse]:
        """One request of a stream: its answers (two for a fast-then-refine route)."""
        if isinstance(request, _Malformed):
            raise InvalidRequest(request.message, field="body")
        self.ongoing += 1
        try:
            # (a stream's x-request-start is when the stream opened, not when this request came)
            decoded, raw, req, start = self._accept(request, context, self.clock(),
                                                    stamped=False)
            answers = (self.front.stream(req) if self.gate is None else self.gate.stream(
                req, elapsed_s=self.clock() - start,
                deadline_s=(req.deadline_ms or self.default_deadline_ms) / 1e3,
                answers=self.front.stream))
            async for response in answers:
                answer = encode_model_infer(response, decoded, raw=raw)
                answer.parameters["triton_final_response"].bool_param = response.final
                yield answer
        finally:
            self.ongoing -= 1


def _stream_error(request: Any, message: str) -> pb.ModelStreamInferResponse:
    """A request's error on the stream, with its id and model so a stub can match it."""
    if isinstance(request, _Malformed):
        return pb.ModelStreamInferResponse(error_message=message)
    return pb.ModelStreamInferResponse(
        error_message=message,
        infer_response=pb.ModelInferResponse(model_name=request.model_name, id=request.id))
