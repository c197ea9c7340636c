"""Typed client for other Ray applications.

    from router.client import TimeshareClient
    client = TimeshareClient()                       # serve.get_app_handle("timeshare")
    resp = client.infer("digits-small", {"pixels": x}, priority="realtime", deadline_ms=200)
    resp = await client.infer_async("digits-small", {"pixels": x})

Concurrent ``infer_async`` calls on one event loop share the handle's calls
(``router._private.coalesce``): while ``max_in_flight`` calls are out, new requests wait for
the next one to return and then leave together in one ``Ingress.infer_many`` call, so Ray's
fixed cost per call (about 400 us a side on 2 cores) is paid once for them. A caller on its own
is sent at once, alone. Every request is still admitted, run, labelled and billed on its own,
and gets its own answer or error; its deadline runs from its arrival at the ingress, so the
wait here (at most one call's round trip) is not counted in it. ``coalesce=False`` sends every
call alone.

Requests and answers cross Ray with plain ``pickle`` (``serialization``) rather than Serve's
default ``cloudpickle`` where Serve's gRPC transport carries handle calls
(``RAY_SERVE_THROUGHPUT_OPTIMIZED``, which ``make serve`` sets). Everything the client sends and
the ingress returns is an instance of an importable class (``router.schemas``,
``router.errors``, numpy arrays), which is all plain pickle needs, and it pickles them about 2.5
times as fast: cloudpickle's pure-Python hook runs once for every object of the graph. On 2
cores that took 5-8 % off a call's CPU on each side, at one caller and at sixteen
(docs/PERFORMANCE.md, twelfth session). On Ray's by-reference transport (Ray's defaults) Ray
serialises the call itself, and the setting changes nothing.

A call made inside an OpenTelemetry span carries that span's W3C context in the request's
``trace_context``: with tracing on in the app (``telemetry.otlp_endpoint``), the request's
trace is part of the caller's and follows its sampling decision.

Errors arrive as the typed exceptions of ``router.errors`` (InvalidRequest, ModelNotFound,
PayloadTooLarge, QuotaExceeded, ...), unwrapped from Ray's task-error wrapper.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Literal

from ray import serve
from ray.exceptions import RayTaskError

from router._private.coalesce import Coalescer
from router.errors import TimeshareError
from router.schemas import (
    MAX_REQUESTS_PER_CALL,
    CacheControl,
    InferenceRequest,
    InferenceResponse,
)
from router.trace_context import current_trace_context

__all__ = ["SERIALIZATIONS", "TimeshareClient"]

# How a call's request and answer are pickled on Serve's gRPC transport (module doc); Serve's
# ``handle.options(request_serialization=..., response_serialization=...)`` takes these names.
SERIALIZATIONS = ("pickle", "cloudpickle")


class TimeshareClient:
    def __init__(self, handle=None, *, app_name: str = "timeshare", coalesce: bool = True,
                 max_in_flight: int = 2, max_batch: int = 64,
                 serialization: Literal["pickle", "cloudpickle"] = "pickle") -> None:
        """``handle``: the app's ingress handle (default ``serve.get_app_handle(app_name)``).
        ``coalesce``: share calls between concurrent ``infer_async`` callers (module doc);
        ``max_in_flight`` calls out at once per event loop before requests wait to share one,
        at most ``max_batch`` requests a call (the ingress accepts up to
        ``router.schemas.MAX_REQUESTS_PER_CALL``). ``serialization``: how calls are pickled
        on Serve's gRPC transport (module doc), set on a copy of ``handle``."""
        if max_in_flight < 1 or not 1 <= max_batch <= MAX_REQUESTS_PER_CALL:
            raise ValueError(f"max_in_flight must be >= 1 and max_batch in 1.."
                             f"{MAX_REQUESTS_PER_CALL}, got {max_in_flight} and {max_batch}")
        if serialization not in SERIALIZATIONS:
            raise ValueError(f"serialization must be one of {SERIALIZATIONS}, "
                             f"got {serialization!r}")
        handle = handle if handle is not None else serve.get_app_handle(app_name)
        self._handle = handle.options(request_serialization=serialization,
                                      response_serialization=serialization)
        self._coalesce, self._max_in_flight, self._max_batch = coalesce, max_in_flight, max_batch
        # one per event loop: a handle's calls belong to the loop that makes them
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Coalescer[
            InferenceRequest, InferenceResponse]] = weakref.WeakKeyDictionary()

    @property
    def handle(self):
        """The ingress handle this client calls, with its ``serialization`` set."""
        return self._handle

    @staticmethod
    def request(model: str, inputs: dict[str, Any], **fields: Any) -> InferenceRequest:
        """The request a call sends: ``fields`` as ``InferenceRequest`` takes them, and the
        caller's current span as its ``trace_context`` unless given (module doc)."""
        if isinstance(fields.get("cache"), dict):
            fields["cache"] = CacheControl(**fields["cache"])
        if "trace_context" not in fields:
            fields["trace_context"] = current_trace_context()
        return InferenceRequest(model=model, inputs=inputs, **fields)

    def infer(self, model: str, inputs: dict[str, Any], **fields: Any) -> InferenceResponse:
        """Blocking call (from a driver or a sync context)."""
        try:
            return self._handle.infer.remote(self.request(model, inputs, **fields)).result()
        except RayTaskError as e:
            raise _unwrap(e) from None

    async def infer_async(self, model: str, inputs: dict[str, Any],
                          **fields: Any) -> InferenceResponse:
        """Awaitable call (from inside another deployment, or any event loop)."""
        request = self.request(model, inputs, **fields)
        if not self._coalesce:
            return await self._one(request)
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = Coalescer(
                self._one, self._many, max_in_flight=self._max_in_flight,
                max_batch=self._max_batch, urgency=lambda r: int(r.priority))
        return await queue.call(request)

    async def _one(self, request: InferenceRequest) -> InferenceResponse:
        try:
            return await self._handle.infer.remote(request)
        except RayTaskError as e:
            raise _unwrap(e) from None

    async def _many(self, requests: list[InferenceRequest],
                    ) -> list[InferenceResponse | BaseException]:
        try:
            return await self._handle.infer_many.remote(requests)
        except RayTaskError as e:
            raise _unwrap(e) from None

    def coalescing(self) -> dict[str, int]:
        """This client's handle calls and the requests they carried, over its event loops."""
        queues = list(self._queues.values())
        return {"calls": sum(q.calls for q in queues),
                "requests": sum(q.requests for q in queues)}

    def status(self) -> dict:
        return self._handle.status.remote().result()


def _unwrap(e: RayTaskError) -> BaseException:
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, TimeshareError) else e
