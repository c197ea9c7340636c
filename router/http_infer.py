"""The v2 ``infer`` route as a plain ASGI endpoint, called by the edge with the body it has read.

Behind the edge (``router.edge``), a plain ``POST /v2/models/{name}[/versions/{version}]/infer``
does not go through FastAPI: its routing (a regex per route), exception middleware, ``Request``
object and body replay cost the ingress more CPU per request than the pipeline's cache hit does
(docs/PERFORMANCE.md). The edge already holds the whole body, so it hands it here: decode,
``Frontend.infer``, encode, answer. Responses and errors are byte-for-byte the FastAPI route's
(same decoder, same encoder, the same ``{"error", "type", "field"}`` bodies), and every other
path (streaming, metadata, repository, status) still goes through FastAPI.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from pydantic import ValidationError
from starlette.responses import JSONResponse

from policies.priority import Priority
from router.decode_memo import DecodeMemo
from router.edge import USED_BACKEND_KEY, arrival_s, shed_reason, used_the_backend
from router.errors import InvalidRequest, ModelNotFound, TimeshareError
from router.frontend import Frontend
from router.schemas import (
    ANONYMOUS,
    CacheControl,
    InferenceRequest,
    new_request_id,
    unchecked,
)
from router.v2 import (
    HEADER_LENGTH,
    JSON_HEADERS,
    DecodedRequest,
    check_bool,
    decode_infer_request,
    encode_infer_response,
    parse_decimal,
)

__all__ = ["InferEndpoint", "MAX_NAME_CHARS", "check_json_only", "check_name", "decode_infer",
           "header_length", "infer_headers", "match_infer", "model_error_first", "presented_key",
           "request_from_v2"]

log = logging.getLogger(__name__)

MAX_NAME_CHARS = 256  # model, route and version names longer than this are refused (400)
Scope = MutableMapping[str, Any]
_INFER = re.compile(r"/v2/models/([^/]+)(?:/versions/([^/]+))?/infer")
# The four cache controls, built once (CacheControl is frozen): shared, never rebuilt per request.
_CACHE_CONTROLS = {(r, w): CacheControl(skip_read=r, skip_write=w)
                   for r in (False, True) for w in (False, True)}


def match_infer(scope: Scope) -> tuple[str, str | None] | None:
    """``(model, version)`` when the scope is a plain v2 infer POST (not ``infer_stream``)."""
    if scope.get("method") != "POST":
        return None
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):  # Starlette keeps the mount prefix in the path
        path = path[len(root):]
    m = _INFER.fullmatch(path)
    return (m.group(1), m.group(2)) if m else None


def check_name(kind: str, value: str | None) -> None:
    if value is not None and len(value) > MAX_NAME_CHARS:
        raise InvalidRequest(f"{kind}: longer than {MAX_NAME_CHARS} characters", field=kind)


async def model_error_first(front: Frontend, name: str, version: str | None,
                            error: InvalidRequest) -> TimeshareError:
    """What a refused request's model says first: an unknown model or version (404) answers
    so whatever the body held, as on every other per-model route; else ``error``. Called on
    the error path only: an accepted request never pays for the lookup."""
    try:
        await front.model_ready(name, version)
    except ModelNotFound as e:
        return e
    except TimeshareError:  # e.g. a route's version: the body's own error stands
        pass
    return error


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The caller's key: ``Authorization: Bearer KEY`` or ``X-API-Key``."""
    auth = headers.get("authorization", "")
    key = auth[7:] if auth.lower().startswith("bearer ") else headers.get("x-api-key")
    return key or None


def _number(p: dict[str, Any], key: str) -> float | None:
    value = p.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"parameters.{key}: expected a number, got {value!r}",
                             field=f"parameters.{key}")
    return float(value)


def request_from_v2(model: str, version: str | None, decoded: DecodedRequest, *,
                    caller_key: str | None = None, arrival_s: float | None = None,
                    shed_reason: str | None = None,
                    max_deadline_ms: float | None = None,
                    trace_context: dict[str, str] | None = None) -> InferenceRequest:
    """Turn a decoded v2 body into an InferenceRequest (parameters carry Timeshare's extras;
    ``arrival_s`` and ``shed_reason``: the edge's stamps, set in the constructor;
    ``max_deadline_ms``: the transport's own deadline (gRPC's), which a parameter may only
    shorten; ``trace_context``: the caller's, from the transport's metadata
    (``router.trace_context.from_metadata``))."""
    p = decoded.parameters
    deadline_ms = _number(p, "deadline_ms")
    timeout = _number(p, "timeout")
    if deadline_ms is None and timeout is not None and timeout > 0:
        deadline_ms = timeout / 1000.0  # Triton's timeout is in microseconds
    if max_deadline_ms is not None and (deadline_ms is None or deadline_ms > max_deadline_ms):
        deadline_ms = max_deadline_ms
    for key in ("text", "caller"):
        if p.get(key) is not None and not isinstance(p[key], str):
            raise InvalidRequest(f"parameters.{key}: expected a string, got {p[key]!r}",
                                 field=f"parameters.{key}")
    cache = _CACHE_CONTROLS[(check_bool(p.get("cache_skip_read", False),
                                        "parameters.cache_skip_read"),
                             check_bool(p.get("cache_skip_write", False),
                                        "parameters.cache_skip_write"))]
    if (model and decoded.inputs and p.get("priority") is None and p.get("caller") is None
            and (deadline_ms is None or deadline_ms > 0)):
        # Nothing here for pydantic to check: the decoder's inputs are numeric arrays, the
        # names come from the path, the rest was checked above. Built unchecked, in the
        # model's field order (tests/unit/http/test_request_from_v2.py holds it so).
        return unchecked(InferenceRequest, {
            "model": model, "version": version, "inputs": dict(decoded.inputs),
            "text": p.get("text"), "priority": Priority.INTERACTIVE,
            "deadline_ms": None if deadline_ms is None else float(deadline_ms),
            "caller": ANONYMOUS, "caller_key": caller_key, "caller_verified": False,
            "cache": cache, "request_id": decoded.request_id or new_request_id(),
            "trace_context": trace_context, "arrival_s": arrival_s, "shed_reason": shed_reason})
    fields: dict[str, Any] = {
        "model": model, "version": version, "inputs": decoded.inputs, "text": p.get("text"),
        "deadline_ms": deadline_ms, "cache": cache, "caller_key": caller_key,
        "arrival_s": arrival_s, "shed_reason": shed_reason, "trace_context": trace_context,
    }
    if p.get("priority") is not None:
        fields["priority"] = p["priority"]
    if p.get("caller") is not None:
        fields["caller"] = p["caller"]
    if decoded.request_id:
        fields["request_id"] = decoded.request_id
    try:
        return InferenceRequest(**fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        name = loc if loc.startswith("inputs") else f"parameters.{loc}"
        raise InvalidRequest(f"{name}: {err['msg']}", field=name) from None


def check_json_only(decoded: DecodedRequest) -> None:
    """Server-sent events carry JSON text: binary outputs cannot be streamed."""
    if decoded.binary_all:
        raise InvalidRequest("parameters.binary_data_output: infer_stream sends JSON only",
                             field="parameters.binary_data_output")
    for name, binary in decoded.outputs or ():
        if binary:
            raise InvalidRequest(f"outputs.{name}.parameters.binary_data: infer_stream sends "
                                 f"JSON only", field=f"outputs.{name}.parameters.binary_data")


def header_length(headers: Mapping[str, str], *, stream: bool) -> int | None:
    """The ``Inference-Header-Content-Length`` value (None: the body is all JSON)."""
    hl = headers.get(HEADER_LENGTH)
    if hl is not None and stream:
        raise InvalidRequest("Inference-Header-Content-Length: infer_stream takes JSON bodies "
                             "only", field="Inference-Header-Content-Length")
    return parse_decimal(hl, "Inference-Header-Content-Length") if hl is not None else None


def decode_infer(name: str, version: str | None, body: bytes, headers: Mapping[str, str],
                 scope: Scope,
                 *, stream: bool, length: int | None = None,
                 decode: Callable[[bytes, int | None], DecodedRequest] = decode_infer_request,
                 ) -> tuple[DecodedRequest, InferenceRequest]:
    """The request a v2 infer body asks for, with the edge's arrival stamp and shed mark
    (the caller has checked the names already: before reading the body). ``length``: the
    header's value when the caller has read it already; ``decode``: the body's decoder."""
    if length is None:
        length = header_length(headers, stream=stream)
    decoded = decode(body, length)
    if stream:
        check_json_only(decoded)
    # the edge's hooks (#14): the deadline runs from arrival; a request the edge shed
    req = request_from_v2(name, version, decoded, caller_key=presented_key(headers),
                          arrival_s=arrival_s(scope), shed_reason=shed_reason(scope))
    return decoded, req


# What a plain infer call reads from the request's headers (lowercase, as ASGI servers send
# header names and as Starlette's ``Headers`` compares them).
_INFER_HEADERS = frozenset({HEADER_LENGTH.encode(), b"authorization", b"x-api-key"})


def infer_headers(scope: Scope) -> dict[str, str]:
    """The headers an infer call reads, the first of each, in one pass over the raw list
    (Starlette's ``Headers`` scans and decodes the whole list for every lookup)."""
    found: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        if key in _INFER_HEADERS:
            found.setdefault(key.decode("latin-1"), value.decode("latin-1"))
    return found


_JSON_CONTENT_TYPE = (b"content-type", b"application/json")


# What an infer answer is made of: status, raw headers (a fresh list), body
InferReply = tuple[int, list[tuple[bytes, bytes]], bytes]


def _json_reply(resp: JSONResponse) -> InferReply:
    return resp.status_code, list(resp.raw_headers), bytes(resp.body)


class InferEndpoint:
    """``await endpoint.respond(scope, name, version, body)``: the answer to a v2 infer request
    the edge has read, which the edge sends. Bodies answered from the exact cache are remembered
    decoded (``router.decode_memo``)."""

    def __init__(self, front: Frontend, memo: DecodeMemo | None = None) -> None:
        self.front = front
        self.memo = memo if memo is not None else DecodeMemo()

    match = staticmethod(match_infer)

    async def respond(self, scope: Scope, name: str, version: str | None, body: bytes
                      ) -> InferReply:
        """The answer to send: status, a fresh raw header list (the caller may add to it) and
        the body. Every error is an answer here too (the app's error shape), never raised."""
        try:
            check_name("model", name)
            check_name("version", version)
            headers_in = infer_headers(scope)
            try:
                length = header_length(headers_in, stream=False)
                decoded, req = decode_infer(name, version, body, headers_in, scope,
                                            stream=False, length=length,
                                            decode=self.memo.decode)
            except InvalidRequest as e:  # an unknown model is 404 whatever the body
                raise await model_error_first(self.front, name, version, e) from None
            response = await self.front.answer(req)
            scope[USED_BACKEND_KEY] = used_the_backend(response)
            payload, headers = encode_infer_response(response, decoded)
            self.memo.answered(body, length, decoded, response.cache)
        except TimeshareError as e:
            return _json_reply(JSONResponse(e.to_dict(), status_code=e.status_code))
        except Exception as e:  # a bug: still the app's error shape, as FastAPI's handler does
            log.exception("unhandled error on POST %s", scope.get("path"))
            body500 = {"error": f"internal error ({type(e).__name__})", "type": "TimeshareError"}
            return _json_reply(JSONResponse(body500, status_code=500))
        if headers is JSON_HEADERS:  # every JSON answer: no per-answer encoding of the names
            raw = [_JSON_CONTENT_TYPE, (b"content-length", str(len(payload)).encode())]
        else:
            raw = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                   for k, v in headers.items()]
            raw.append((b"content-length", str(len(payload)).encode()))
        return 200, raw, payload
