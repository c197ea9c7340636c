"""HTTP routes (Open Inference Protocol v2) over a ``Frontend``; no Ray here.

The ingress deployment mounts this FastAPI app; tests can mount it on a plain ASGI server too.
Every error, including unmatched paths and errors FastAPI itself raises, is a JSON body
``{"error": ..., "type": ..., "field": ...}`` with its 4xx/5xx status; a method a path does not
take is 405 with ``Allow``. The OpenAPI document (``router.v2_schema``) declares each route's
request body and every status it answers; ``tests/integration/app/test_openapi_contract.py``
holds the server to it with schemathesis.
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
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.routing import get_route_path

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
    model_error_first,
    presented_key,
    request_from_v2,
)
from router.publish import publish_routes
from router.schemas import InferenceRequest
from router.ui import ui_routes
from router.v2 import DecodedRequest, encode_infer_response, parse_decimal
from router.v2_schema import (
    INFER_BODY,
    INFER_ERRORS,
    INFER_OK,
    REPOSITORY_INDEX_OK,
    STREAM_BODY,
    STREAM_OK,
    LiveBody,
    LoadAnswer,
    ModelMetadata,
    NotReadyBody,
    ReadyBody,
    ServerMetadata,
    finish_openapi,
    ok,
    responses,
)

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
    routers = [_health_routes(front), _model_routes(front), _infer_routes(front),
               _admin_routes(front)]
    publisher = getattr(front, "publisher", None)  # router.publish: model upload (#21)
    if publisher is not None:
        routers.append(publish_routes(publisher, check_key=lambda r: _check_key(front, r),
                                      read_body=_read_body))
    routers.append(ui_routes())  # the read-only status page (router/ui)
    for router in routers:
        app.include_router(router)
    _add_error_handlers(app, _MethodIndex(routers))
    _exact_openapi(app, front)
    return app


class _MethodIndex:
    """Which methods the app's routes take at a path: the ``Allow`` of a 405 (RFC 9110), for
    every route at that path (two may share one: publish and retire). Built once from the
    routers the app includes; asked on the 405 path only."""

    def __init__(self, routers: list[APIRouter]) -> None:
        self._routes = [(route.path_regex, frozenset(route.methods or ())) for router in routers
                        for route in router.routes if isinstance(route, APIRoute)]

    def allow(self, path: str, also: str = "") -> str:
        """``Allow`` for ``path``; ``also``: an ``Allow`` the router gave (routes not listed
        here, such as ``/openapi.json``)."""
        methods = {m.strip() for m in also.split(",") if m.strip()}
        for regex, route_methods in self._routes:
            if regex.match(path):
                methods |= route_methods
        if "GET" in methods:
            methods.add("HEAD")  # Starlette answers HEAD wherever GET is
        return ", ".join(sorted(methods))


def _exact_openapi(app: FastAPI, front: Frontend) -> None:
    """``app.openapi`` made exact once, when first asked (``router.v2_schema.finish_openapi``):
    the operator key's security on the routes that need it (``/v2/status`` only when a key is
    set: without one it is open)."""
    generate = app.openapi
    secured = {("POST", "/v2/repository/index"), ("POST", "/v2/repository/models/{name}/load"),
               ("POST", "/v2/repository/models/{name}/unload"),
               ("POST", "/v2/repository/models/{name}/versions/{version}"),
               ("DELETE", "/v2/repository/models/{name}/versions/{version}")}
    if front.api_key is not None:
        secured.add(("GET", "/v2/status"))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = finish_openapi(generate(), secured=secured)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_error_handlers(app: FastAPI, methods: _MethodIndex) -> None:
    @app.exception_handler(TimeshareError)
    async def _on_error(_: Request, e: TimeshareError):
        return JSONResponse(e.to_dict(), status_code=e.status_code)

    @app.exception_handler(HTTPException)
    async def _on_http(request: Request, e: HTTPException):
        if e.status_code == 404:
            return _error_body(404, f"path: no route {request.url.path!r}", "path")
        if e.status_code == 405:  # RFC 9110: a 405 names the methods the resource takes
            allow = methods.allow(get_route_path(request.scope),
                                  (e.headers or {}).get("Allow", ""))
            answer = _error_body(405, f"method: {request.method} is not allowed on "
                                      f"{request.url.path}; allowed: {allow}")
            answer.headers["Allow"] = allow
            return answer
        answer = _error_body(e.status_code, f"{request.method} {request.url.path}: {e.detail}")
        answer.headers.update(e.headers or {})
        return answer

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
    r = APIRouter()

    @r.get("/v2/health/live", responses=responses({200: ok(LiveBody)}))
    async def live():
        return {"live": True}

    @r.get("/v2/health/ready", responses={
        200: ok(ReadyBody, "Some model is ready."),
        503: ok(ReadyBody, "No model is ready yet."), **responses({})})
    async def ready():
        ok_ = any(e.ready for e in front.live_models().values())
        return JSONResponse({"ready": ok_}, status_code=200 if ok_ else 503)

    @r.get("/v2", responses=responses({200: ok(ServerMetadata)}))
    async def server_metadata():
        return {"name": "timeshare", "version": "0.1.0",
                "extensions": ["binary_tensor_data", "model_repository", "timeshare_status"]}

    @r.get("/v2/status", responses=responses(
        {200: ok(description="Pools, models, every ingress replica's breakers and edge "
                             "counters, cache, alerts (see the README).",
                 content={"application/json": {"schema": {"type": "object"}}})}, 401))
    async def status(request: Request):
        if front.api_key is not None:  # inventory, budgets, breakers: operators only
            _check_key(front, request)
        return await front.status()

    return r


def _model_routes(front: Frontend) -> APIRouter:
    """Metadata and readiness of models and routes (routes are virtual models)."""
    r = APIRouter()

    async def _metadata(name: str, version: str | None):
        check_name("model", name)
        check_name("version", version)
        return await front.model_metadata(name, version)

    async def _ready(name: str, version: str | None):
        """200 ``{"ready": true}``, else the status of why not (404: unknown or not ready;
        400: a bad name, a route's version), with ``"ready": false`` in the error body."""
        try:
            check_name("model", name)
            check_name("version", version)
            await front.model_ready(name, version)
        except TimeshareError as e:
            return JSONResponse({"ready": False, **e.to_dict()}, status_code=e.status_code)
        return {"ready": True}

    meta = responses({200: ok(ModelMetadata)}, 400, 404)
    ready = responses({200: ok(ReadyBody, "Ready: every model of a route, or the version.")},
                      400, 404, error_model=NotReadyBody)

    @r.get("/v2/models/{name}", responses=meta)
    async def metadata(name: str):
        return await _metadata(name, None)

    @r.get("/v2/models/{name}/versions/{version}", responses=meta)
    async def metadata_version(name: str, version: str):
        return await _metadata(name, version)

    @r.get("/v2/models/{name}/ready", responses=ready)
    async def model_ready(name: str):
        return await _ready(name, None)

    @r.get("/v2/models/{name}/versions/{version}/ready", responses=ready)
    async def model_version_ready(name: str, version: str):
        return await _ready(name, version)

    return r


async def _decode(front: Frontend, name: str, version: str | None, request: Request, *,
                  stream: bool) -> tuple[DecodedRequest, InferenceRequest]:
    check_name("model", name)
    check_name("version", version)
    body = await _read_body(request, front.max_body_bytes)
    try:
        return decode_infer(name, version, body, request.headers, request.scope, stream=stream)
    except InvalidRequest as e:  # an unknown model is 404 whatever the body
        raise await model_error_first(front, name, version, e) from None


def _infer_routes(front: Frontend) -> APIRouter:
    r = APIRouter()
    infer_answers = responses(INFER_OK, *INFER_ERRORS)
    stream_answers = responses(STREAM_OK, *INFER_ERRORS)

    async def _infer(name: str, version: str | None, request: Request) -> Response:
        decoded, req = await _decode(front, name, version, request, stream=False)
        response = await front.answer(req)
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

    @r.post("/v2/models/{name}/infer_stream", openapi_extra=STREAM_BODY,
            responses=stream_answers)
    async def infer_stream(name: str, request: Request):
        return await _stream(name, None, request)

    @r.post("/v2/models/{name}/versions/{version}/infer_stream", openapi_extra=STREAM_BODY,
            responses=stream_answers)
    async def infer_stream_version(name: str, version: str, request: Request):
        return await _stream(name, version, request)

    @r.post("/v2/models/{name}/infer", openapi_extra=INFER_BODY, responses=infer_answers)
    async def infer(name: str, request: Request):
        return await _infer(name, None, request)

    @r.post("/v2/models/{name}/versions/{version}/infer", openapi_extra=INFER_BODY,
            responses=infer_answers)
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
    r = APIRouter()
    load = responses({200: ok(LoadAnswer)}, 400, 401, 404, 503)

    @r.post("/v2/repository/index", responses=responses(REPOSITORY_INDEX_OK, 401))
    async def repo_index(request: Request):
        _check_key(front, request)
        return await front.repository_index()

    @r.post("/v2/repository/models/{name}/load", responses=load)
    async def repo_load(name: str, request: Request):
        _check_key(front, request)
        check_name("name", name)
        return await front.load_model(name)

    @r.post("/v2/repository/models/{name}/unload", responses=load)
    async def repo_unload(name: str, request: Request):
        _check_key(front, request)
        check_name("name", name)
        return await front.unload_model(name)

    return r
