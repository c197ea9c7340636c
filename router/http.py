"""HTTP routes (Open Inference Protocol v2) over a ``Frontend``; no Ray here.

The ingress deployment mounts this FastAPI app; tests can mount it on a plain ASGI server too.
Every error becomes a JSON body ``{"error": ..., "field": ...}`` with its 4xx/5xx status.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from router.edge import arrival_s
from router.errors import InvalidRequest, PayloadTooLarge, TimeshareError, Unauthorized
from router.schemas import CacheControl, InferenceRequest, InferenceResponse

from router.v2 import (
    HEADER_LENGTH,
    DecodedRequest,
    decode_infer_request,
    encode_infer_response,
    model_metadata,
)

__all__ = ["Frontend", "build_http_app", "request_from_v2"]

log = logging.getLogger(__name__)


class Frontend(Protocol):
    """What the HTTP layer needs from the ingress."""

    api_key: str | None
    max_body_bytes: int

    async def infer(self, request: InferenceRequest) -> InferenceResponse: ...
    def stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]: ...
    def live_models(self) -> dict[str, Any]: ...
    async def model_entry(self, name: str, version: str | None): ...
    async def repository_index(self) -> list[dict[str, Any]]: ...
    async def load_model(self, name: str) -> dict[str, Any]: ...
    async def unload_model(self, name: str) -> dict[str, Any]: ...
    async def status(self) -> dict[str, Any]: ...


def _error(e: TimeshareError) -> JSONResponse:
    return JSONResponse(e.to_dict(), status_code=e.status_code)


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise PayloadTooLarge(f"body: {length} bytes exceeds the limit of {limit}", field="body")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"body: exceeds the limit of {limit} bytes", field="body")
        chunks.append(chunk)
    return b"".join(chunks)


def request_from_v2(model: str, version: str | None, decoded) -> InferenceRequest:
    """Turn a decoded v2 body into an InferenceRequest (parameters carry Timeshare's extras)."""
    p = decoded.parameters
    deadline_ms = p.get("deadline_ms")
    if deadline_ms is None and isinstance(p.get("timeout"), (int, float)) and p["timeout"] > 0:
        deadline_ms = p["timeout"] / 1000.0  # Triton's timeout is in microseconds
    fields: dict[str, Any] = {
        "model": model,
        "version": version,
        "inputs": decoded.inputs,
        "text": p.get("text"),
        "deadline_ms": deadline_ms,
        "cache": CacheControl(skip_read=bool(p.get("cache_skip_read", False)),
                              skip_write=bool(p.get("cache_skip_write", False))),
    }
    if p.get("priority") is not None:
        fields["priority"] = p["priority"]
    if p.get("caller") is not None:
        fields["caller"] = p["caller"]
    if decoded.request_id:
        fields["request_id"] = decoded.request_id
    from pydantic import ValidationError

    try:
        return InferenceRequest(**fields)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        name = loc if loc.startswith("inputs") else f"parameters.{loc}"
        raise InvalidRequest(f"{name}: {err['msg']}", field=name) from None


def build_http_app(front: Frontend) -> FastAPI:
    app = FastAPI(title="Timeshare", docs_url=None, redoc_url=None)

    @app.exception_handler(TimeshareError)
    async def _on_error(_: Request, e: TimeshareError):
        return _error(e)

    def _check_key(request: Request) -> None:
        if front.api_key is None:
            raise Unauthorized("repository API disabled: no api_key configured")
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        if not given or not hmac.compare_digest(given.encode(), front.api_key.encode()):
            raise Unauthorized("missing or wrong API key (Authorization: Bearer KEY or X-API-Key)")

    @app.get("/v2/health/live")
    async def live():
        return {"live": True}

    @app.get("/v2/health/ready")
    async def ready():
        ok = any(e.ready for e in front.live_models().values())
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/v2")
    async def server_metadata():
        return {"name": "timeshare", "version": "0.1.0",
                "extensions": ["binary_tensor_data", "model_repository", "timeshare_status"]}

    @app.get("/v2/status")
    async def status():
        return await front.status()

    async def _metadata(name: str, version: str | None):
        entry, _ = await front.model_entry(name, version)
        ready = sorted(v for v, s in entry.versions.items() if s.state == "ready")
        return model_metadata(entry.config, ready)

    async def _ready(name: str, version: str | None):
        try:
            await front.model_entry(name, version)
        except TimeshareError as e:
            return JSONResponse({"ready": False, "error": e.message}, status_code=400)
        return {"ready": True}

    @app.get("/v2/models/{name}")
    async def metadata(name: str):
        return await _metadata(name, None)

    @app.get("/v2/models/{name}/versions/{version}")
    async def metadata_version(name: str, version: str):
        return await _metadata(name, version)

    @app.get("/v2/models/{name}/ready")
    async def model_ready(name: str):
        return await _ready(name, None)

    @app.get("/v2/models/{name}/versions/{version}/ready")
    async def model_version_ready(name: str, version: str):
        return await _ready(name, version)

    async def _infer(name: str, version: str | None, request: Request) -> Response:
        body = await _read_body(request, front.max_body_bytes)
        hl = request.headers.get(HEADER_LENGTH)
        if hl is not None and not hl.isdigit():
            raise InvalidRequest(f"Inference-Header-Content-Length: expected an integer, got {hl!r}",
                                 field="Inference-Header-Content-Length")
        decoded = decode_infer_request(body, int(hl) if hl is not None else None)
        req = request_from_v2(name, version, decoded)
        req.arrival_s = arrival_s(request.scope)  # edge hook (#14): deadline from arrival
        response = await front.infer(req)
        payload, headers = encode_infer_response(response, decoded)
        return Response(payload, headers=headers, media_type=headers["content-type"])

    async def _stream(name: str, version: str | None, request: Request) -> Response:
        """Server-sent events: one ``data:`` v2 JSON response per answer (fast, then refined)."""
        body = await _read_body(request, front.max_body_bytes)
        decoded = decode_infer_request(body, None)
        req = request_from_v2(name, version, decoded)
        req.arrival_s = arrival_s(request.scope)  # edge hook (#14): deadline from arrival
        answers = front.stream(req)
        first = await answers.__anext__()  # errors before the first answer keep their 4xx status
        plain = DecodedRequest(decoded.request_id, {}, decoded.parameters, decoded.outputs, False)

        async def events():
            resp = first
            while True:
                payload, _ = encode_infer_response(resp, plain)
                yield b"data: " + payload + b"\n\n"
                try:
                    resp = await answers.__anext__()
                except StopAsyncIteration:
                    return
                except TimeshareError as e:  # after the first answer: report in-band
                    yield b"event: error\ndata: " + json.dumps(e.to_dict()).encode() + b"\n\n"
                    return

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v2/models/{name}/infer_stream")
    async def infer_stream(name: str, request: Request):
        return await _stream(name, None, request)

    @app.post("/v2/models/{name}/versions/{version}/infer_stream")
    async def infer_stream_version(name: str, version: str, request: Request):
        return await _stream(name, version, request)

    @app.post("/v2/models/{name}/infer")
    async def infer(name: str, request: Request):
        return await _infer(name, None, request)

    @app.post("/v2/models/{name}/versions/{version}/infer")
    async def infer_version(name: str, version: str, request: Request):
        return await _infer(name, version, request)

    @app.post("/v2/repository/index")
    async def repo_index(request: Request):
        _check_key(request)
        return await front.repository_index()

    @app.post("/v2/repository/models/{name}/load")
    async def repo_load(name: str, request: Request):
        _check_key(request)
        return await front.load_model(name)

    @app.post("/v2/repository/models/{name}/unload")
    async def repo_unload(name: str, request: Request):
        _check_key(request)
        return await front.unload_model(name)

    return app
