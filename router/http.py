"""HTTP routes (Open Inference Protocol v2) over a ``Frontend``; no Ray here.

The ingress deployment mounts this FastAPI app; tests can mount it on a plain ASGI server too.
Every error, including unmatched paths and errors FastAPI itself raises, is a JSON body
``{"error": ..., "type": ..., "field": ...}`` with its 4xx/5xx status; the OpenAPI schema
declares the request bodies and those error responses.
"""

from __future__ import annotations

import hmac
import inspect
import json
import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from router.errors import (
    InvalidRequest,
    ModelNotFound,
    PayloadTooLarge,
    TimeshareError,
    Unauthorized,
)
from router.frontend import Frontend
from router.http_infer import (
    MAX_NAME_CHARS,
    check_name,
    decode_infer,
    presented_key,
    request_from_v2,
)
from router.publish import publish_routes
from router.schemas import InferenceRequest
from router.ui import ui_routes
from router.v2 import DecodedRequest, encode_infer_response, parse_decimal
from router.v2_schema import ERROR_RESPONSES, INFER_BODY

__all__ = ["build_http_app", "request_from_v2", "MAX_NAME_CHARS"]

log = logging.getLogger(__name__)

_STATUS_TYPES = {404: ModelNotFound, 405: InvalidRequest, 413: PayloadTooLarge}


def _error(e: TimeshareError) -> JSONResponse:
    return JSONResponse(e.to_dict(), status_code=e.status_code)


def _error_body(status: int, message: str, field: str | None = None) -> JSONResponse:
    kind = _STATUS_TYPES.get(status, TimeshareError).__name__
    body = {"error": message, "type": kind, **({"field": field} if field else {})}
    return JSONResponse(body, status_code=status)


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and parse_decimal(length, "Content-Length") > limit:
        raise PayloadTooLarge(f"body: {length} bytes exceeds the limit of {limit}", field="body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body: exceeds the limit of {limit} bytes", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


# FastAPI >= 0.16x wraps every request in its own OpenTelemetry middleware, which asks the
# global providers per request whether it is on (~5 us a request, docs/PERFORMANCE.md) and,
# once a process configures a global provider, records a second request histogram beside
# Timeshare's own (alerting.telemetry). Off, where this FastAPI has the switch.
_NO_FASTAPI_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters else {})


def build_http_app(front: Frontend) -> FastAPI:
    """The v2 app: health, metadata, inference, repository and status routes over ``front``."""
    app = FastAPI(title="Timeshare", docs_url=None, redoc_url=None, version="0.1.0",
                  **_NO_FASTAPI_TELEMETRY)
    _add_error_handlers(app)
    app.include_router(_health_routes(front))
    app.include_router(_model_routes(front))
    app.include_router(_infer_routes(front))
    app.include_router(_admin_routes(front))
    publisher = getattr(front, "publisher", None)  # router.publish: model upload (#21)
    if publisher is not None:
        app.include_router(publish_routes(publisher, check_key=lambda r: _check_key(front, r),
                                          read_body=_read_body))
    app.include_router(ui_routes())  # the read-only status page (router/ui)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TimeshareError)
    async def _on_error(_: Request, e: TimeshareError):
        return JSONResponse(e.to_dict(), status_code=e.status_code)

    @app.exception_handler(HTTPException)
    async def _on_http(request: Request, e: HTTPException):
        if e.status_code == 404:
            return _error_body(404, f"path: no route {request.url.path!r}", "path")
        return _error_body(e.status_code, f"{request.method} {request.url.path}: {e.detail}")

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, e: RequestValidationError):
        err = e.errors()[0]
        field = ".".join(str(x) for x in err["loc"][1:]) or None
        return _error_body(400, f"{field}: {err['msg']}", field)

    @app.exception_handler(Exception)
    async def _on_crash(request: Request, e: Exception):  # a bug: still the app's shape
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error_body(500, f"internal error ({type(e).__name__})")


def _health_routes(front: Frontend) -> APIRouter:
    r = APIRouter(responses=ERROR_RESPONSES)

    @r.get("/v2/health/live")
    async def live():
        return {"live": True}

    @r.get("/v2/health/ready")
    async def ready():
        ok = any(e.ready for e in front.live_models().values())
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @r.get("/v2")
    async def server_metadata():
        return {"name": "timeshare", "version": "0.1.0",
                "extensions": ["binary_tensor_data", "model_repository", "timeshare_status"]}

    @r.get("/v2/status")
    async def status(request: Request):
        if front.api_key is not None:  # inventory, budgets, breakers: operators only
            _check_key(front, request)
        return await front.status()

    return r


def _model_routes(front: Frontend) -> APIRouter:
    """Metadata and readiness of models and routes (routes are virtual models)."""
    r = APIRouter(responses=ERROR_RESPONSES)

    async def _metadata(name: str, version: str | None):
        check_name("model", name)
        check_name("version", version)
        return await front.model_metadata(name, version)

    async def _ready(name: str, version: str | None):
        check_name("model", name)
        check_name("version", version)
        try:
            await front.model_ready(name, version)
        except TimeshareError as e:
            return JSONResponse({"ready": False, **e.to_dict()}, status_code=400)
        return {"ready": True}

    @r.get("/v2/models/{name}")
    async def metadata(name: str):
        return await _metadata(name, None)

    @r.get("/v2/models/{name}/versions/{version}")
    async def metadata_version(name: str, version: str):
        return await _metadata(name, version)

    @r.get("/v2/models/{name}/ready")
    async def model_ready(name: str):
        return await _ready(name, None)

    @r.get("/v2/models/{name}/versions/{version}/ready")
    async def model_version_ready(name: str, version: str):
        return await _ready(name, version)

    return r


async def _decode(front: Frontend, name: str, version: str | None, request: Request, *,
                  stream: bool) -> tuple[DecodedRequest, InferenceRequest]:
    check_name("model", name)
    check_name("version", version)
    body = await _read_body(request, front.max_body_bytes)
    return decode_infer(name, version, body, request.headers, request.scope, stream=stream)


def _infer_routes(front: Frontend) -> APIRouter:
    r = APIRouter(responses=ERROR_RESPONSES)

    async def _infer(name: str, version: str | None, request: Request) -> Response:
        decoded, req = await _decode(front, name, version, request, stream=False)
        response = await front.infer(req)
        payload, headers = encode_infer_response(response, decoded)
        return Response(payload, headers=headers, media_type=headers["content-type"])

    async def _stream(name: str, version: str | None, request: Request) -> Response:
        """Server-sent events: one ``data:`` v2 JSON response per answer (fast, then refined).

        Everything that can fail for the request's own sake (decoding, the first answer, the
        requested outputs) fails before the 200 is sent; only a later answer's error travels
        in-band as an ``error`` event.
        """
        decoded, req = await _decode(front, name, version, request, stream=True)
        answers = front.stream(req)
        first, _ = encode_infer_response(await answers.__anext__(), decoded)

        async def events():
            yield b"data: " + first + b"\n\n"
            while True:
                try:
                    payload, _ = encode_infer_response(await answers.__anext__(), decoded)
                except StopAsyncIteration:
                    return
                except TimeshareError as e:
                    yield b"event: error\ndata: " + json.dumps(e.to_dict()).encode() + b"\n\n"
                    return
                yield b"data: " + payload + b"\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @r.post("/v2/models/{name}/infer_stream", openapi_extra=INFER_BODY)
    async def infer_stream(name: str, request: Request):
        return await _stream(name, None, request)

    @r.post("/v2/models/{name}/versions/{version}/infer_stream", openapi_extra=INFER_BODY)
    async def infer_stream_version(name: str, version: str, request: Request):
        return await _stream(name, version, request)

    @r.post("/v2/models/{name}/infer", openapi_extra=INFER_BODY)
    async def infer(name: str, request: Request):
        return await _infer(name, None, request)

    @r.post("/v2/models/{name}/versions/{version}/infer", openapi_extra=INFER_BODY)
    async def infer_version(name: str, version: str, request: Request):
        return await _infer(name, version, request)

    return r


def _check_key(front: Frontend, request: Request) -> None:
    if front.api_key is None:
        raise Unauthorized("repository API disabled: no api_key configured")
    given = presented_key(request.headers) or ""
    if not given or not hmac.compare_digest(given.encode(), front.api_key.encode()):
        raise Unauthorized("missing or wrong API key (Authorization: Bearer KEY or X-API-Key)")


def _admin_routes(front: Frontend) -> APIRouter:
    r = APIRouter(responses=ERROR_RESPONSES)

    @r.post("/v2/repository/index")
    async def repo_index(request: Request):
        _check_key(front, request)
        return await front.repository_index()

    @r.post("/v2/repository/models/{name}/load")
    async def repo_load(name: str, request: Request):
        _check_key(front, request)
        check_name("name", name)
        return await front.load_model(name)

    @r.post("/v2/repository/models/{name}/unload")
    async def repo_unload(name: str, request: Request):
        _check_key(front, request)
        check_name("name", name)
        return await front.unload_model(name)

    return r
