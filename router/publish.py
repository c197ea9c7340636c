"""The publish API: upload a model version (TorchServe's management API idea, KServe v2 paths).

``POST /v2/repository/models/{name}/versions/{version}`` with the operator key takes either

- a tar archive (``Content-Type: application/x-tar``, ``application/gzip`` or
  ``application/octet-stream``; ``tar czf - -C mymodel .``), or
- ``multipart/form-data`` whose file parts are the files (``curl -F config.yaml=@config.yaml
  -F model.onnx=@model.onnx``; the part's filename names the file),

holding ``config.yaml`` and the weight file. The body is bounded (413) before it is parsed;
validation and the atomic publish are ``pool.publish.Publisher``'s (run off the event loop:
loading and warming a model takes a while). ``201`` once the version is in the repository: the
pools load it on their next poll and the previous default keeps answering until it is warm.
``DELETE`` on the same path retires a version. Refusals are the app's JSON error shape with the
archive ``file`` and the ``field`` named; nothing is left behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from pool.publish import Publisher, PublishRefused
from router.errors import PayloadTooLarge
from router.v2_schema import PublishAnswer, ok, responses

__all__ = ["publish_routes"]

_TAR_TYPES = ("application/x-tar", "application/gzip", "application/x-gzip",
              "application/octet-stream", "application/x-compressed-tar")


# The body as OpenAPI can say it: bytes of an archive, or file parts. That the bytes are a tar
# archive holding a usable model is beyond JSON Schema: any bytes fit ``format: binary``, and
# the server refuses what is not an archive (400) or not a usable model (422).
_ARCHIVE_BODY: dict[str, Any] = {"requestBody": {
    "required": True,
    "description": "A tar archive (tar czf - -C mymodel .) or multipart/form-data file parts "
                   "(the part's filename names the file), holding config.yaml and the weights.",
    "content": {
        **{t: {"schema": {"type": "string", "format": "binary"}} for t in _TAR_TYPES},
        "multipart/form-data": {"schema": {
            "type": "object", "additionalProperties": {"type": "string", "format": "binary"}}},
    }}}


def _refused(e: PublishRefused) -> JSONResponse:
    body: dict[str, Any] = {"error": str(e), "type": "PublishRefused", "file": e.file}
    if e.field:
        body["field"] = e.field
    return JSONResponse(body, status_code=e.status)


def _multipart(content_type: str, body: bytes) -> list[tuple[str, bytes]]:
    """The file parts of a multipart body (stdlib parser: no extra dependency)."""
    msg = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body)
    if not msg.is_multipart():
        raise PublishRefused(400, "body", "not a multipart/form-data body", field="body")
    parts = []
    for part in msg.iter_parts():
        filename = part.get_filename() or part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not filename or not isinstance(payload, bytes):
            raise PublishRefused(400, "body", "every part must be a file with a filename",
                                 field="body")
        parts.append((str(filename), payload))
    if not parts:
        raise PublishRefused(400, "body", "no files uploaded", field="body")
    return parts


def publish_routes(publisher: Publisher, *, check_key: Callable[[Request], None],
                   read_body: Callable[[Request, int], Any]) -> APIRouter:
    """Routes over ``publisher``; ``check_key`` raises 401 without the operator key and
    ``read_body(request, limit)`` reads a bounded body (413 beyond ``limit``)."""
    r = APIRouter()
    limit = publisher.settings.max_archive_bytes
    path = "/v2/repository/models/{name}/versions/{version}"

    @r.post(path, status_code=201, openapi_extra=_ARCHIVE_BODY, responses=responses(
        {201: ok(PublishAnswer, "Published: the pools load it on their next poll.")},
        400, 401, 409, 413, 415, 422))
    async def publish(name: str, version: str, request: Request):
        check_key(request)
        try:
            body: bytes = await read_body(request, limit)
        except PayloadTooLarge as e:
            return JSONResponse({**e.to_dict(), "file": "archive"}, status_code=413)
        ctype = request.headers.get("content-type", "application/x-tar")
        try:
            if ctype.lower().startswith("multipart/form-data"):
                files = publisher.read_parts(_multipart(ctype, body))
            elif ctype.split(";")[0].strip().lower() in _TAR_TYPES:
                files = publisher.read_tar(body)
            else:
                raise PublishRefused(415, "body", f"Content-Type {ctype!r}: send a tar archive "
                                     "or multipart/form-data", field="Content-Type")
            done = await asyncio.to_thread(publisher.publish, name, version, files)
        except PublishRefused as e:
            return _refused(e)
        return JSONResponse({"name": done.name, "version": done.version, "state": "PUBLISHED",
                             "files": list(done.files), "bytes": done.nbytes,
                             "new_model": done.new_model}, status_code=201)

    @r.delete(path, responses=responses({200: ok(PublishAnswer, "Retired.")}, 400, 401, 404,
                                        409))
    async def retire(name: str, version: str, request: Request):
        check_key(request)
        try:
            await asyncio.to_thread(publisher.retire, name, version)
        except PublishRefused as e:
            return _refused(e)
        return {"name": name, "version": version, "state": "RETIRED"}

    return r
