"""OpenAPI declarations of the v2 HTTP API: request bodies, answers and the statuses of each route.

The routes answer with hand-built responses and decode their bodies by hand (``router.v2``: JSON
or JSON + binary tensors), so FastAPI cannot infer a schema from their signatures; these
declarations document them, for clients and for schema-based fuzzers (the contract test runs
``schemathesis --checks all`` against the running app). They document; they do not validate,
so they cost nothing per request.

The rule: a request the schema calls valid is not refused for its shape, and every status a
route answers is declared on it with the body it carries. What JSON Schema cannot say is said in
the descriptions: tensors must match the model's metadata (``GET /v2/models/{name}``), input
names are unique, and Triton's binary tensor extension (``BINARY_EXTENSION``) is a framing of
its own, documented beside the JSON body rather than as a second body schema that any bytes
would satisfy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pool.config import DTYPES
from pool.publish import NAME_PATTERN
from router.http_infer import MAX_NAME_CHARS

__all__ = ["ADMIN_SECURITY", "BINARY_EXTENSION", "INFER_BODY", "INFER_ERRORS", "INFER_OK",
           "REPOSITORY_INDEX_OK", "SECURITY_SCHEMES", "STREAM_BODY", "STREAM_OK", "ErrorBody",
           "LiveBody", "LoadAnswer", "ModelMetadata", "NotReadyBody", "PublishAnswer",
           "ReadyBody", "ServerMetadata", "V2InferRequest", "V2InferResponse",
           "finish_openapi", "ok", "responses"]

Datatype = Literal[tuple(DTYPES)]  # type: ignore[valid-type]
_JSON = "application/json"


class ErrorBody(BaseModel):
    """Every error the app returns, whatever its status."""

    error: str = Field(..., description="What is wrong, naming the field and the expectation.")
    type: str = Field(..., description="Error class, e.g. InvalidRequest, ModelNotFound.")
    field: str | None = Field(None, description="The request field at fault, when one is.")


class NotReadyBody(ErrorBody):
    """A model readiness answer that is not 200: why, with ``ready: false``."""

    ready: Literal[False] = Field(..., description="Always false here.")


class ReadyBody(BaseModel):
    ready: bool = Field(..., description="True when ready.")


class LiveBody(BaseModel):
    live: bool = Field(..., description="Always true: the server answers.")


class ServerMetadata(BaseModel):
    name: str = Field(..., description="Server name.")
    version: str = Field(..., description="Server version.")
    extensions: list[str] = Field(..., description="Protocol extensions supported.")


class TensorMetadata(BaseModel):
    name: str = Field(..., description="Tensor name.")
    datatype: Datatype = Field(..., description="Element type.")  # type: ignore[valid-type]
    shape: list[int] = Field(..., description="Dims, batch first; -1 = any size.")


class ModelMetadata(BaseModel):
    name: str = Field(..., description="Model or route name.")
    versions: list[str] = Field(..., description="Ready versions (none for a route).")
    platform: str = Field(..., description="Weights format, or timeshare_route.")
    inputs: list[TensorMetadata] = Field(..., description="Input tensors an infer call takes.")
    outputs: list[TensorMetadata] = Field(..., description="Output tensors it answers.")
    parameters: dict[str, Any] | None = Field(None, description="A route's strategy and models.")


# A tensor's values: numbers (booleans for BOOL), flat or nested row-major.
_VALUES: dict[str, Any] = {
    "type": "array",
    "items": {"anyOf": [{"type": "number"}, {"type": "boolean"},
                        {"type": "array", "items": {}}]},
    "description": "Values, flat or nested, row-major: as many as the shape holds, of the "
                   "datatype's range (BOOL: true/false or 0/1).",
}


class V2InputTensor(BaseModel):
    """An input tensor in the JSON body: ``data`` is required here; a tensor sent in the binary
    section (``BINARY_EXTENSION``) has ``parameters.binary_data_size`` instead."""

    name: str = Field(..., min_length=1, description="Input name; unique in the request.")
    shape: list[int] = Field(..., description="Dims, batch first.",
                             json_schema_extra={"items": {"type": "integer", "minimum": 0}})
    datatype: Datatype = Field(..., description="Element type.")  # type: ignore[valid-type]
    data: list[Any] = Field(..., json_schema_extra=_VALUES)
    parameters: dict[str, Any] | None = Field(
        None, description="Free-form; binary_data_size belongs to the binary extension only.",
        json_schema_extra={"not": {"required": ["binary_data_size"]}})


class V2RequestedOutput(BaseModel):
    name: str = Field(..., description="Output name; each at most once.")
    parameters: dict[str, Any] | None = Field(
        None, description="binary_data (bool): this output in the binary section (infer only).",
        json_schema_extra={"properties": {"binary_data": {"type": "boolean"}}})


class V2Parameters(BaseModel):
    """Request parameters: Timeshare's options; other keys are ignored."""

    model_config = ConfigDict(extra="allow")

    priority: Literal["realtime", "interactive", "batch", "background", 0, 1, 2, 3] | None = Field(
        None, description="Priority class (name, or 0 = realtime .. 3 = background).")
    deadline_ms: float | None = Field(None, gt=0, description="Answer within this many ms.")
    timeout: float | None = Field(None, description="Triton's timeout in microseconds (read "
                                                    "when deadline_ms is absent; <= 0: none).")
    caller: str | None = Field(None, min_length=1, max_length=128, description=(
        "Caller identity (with caller keys: must be the key's)."))
    text: str | None = Field(None, description="Raw text for the semantic cache and rules.")
    # booleans, never null: the server refuses anything but true or false here
    cache_skip_read: bool = Field(False, description="Do not answer from the cache.")
    cache_skip_write: bool = Field(False, description="Do not store the answer.")
    binary_data_output: bool = Field(False, description="Every output in the binary section "
                                                        "(infer only).")


class V2InferRequest(BaseModel):
    """Open Inference Protocol request; Timeshare options travel in ``parameters``."""

    id: str | None = Field(None, description="Echoed back; never an identity.")
    inputs: list[V2InputTensor] = Field(..., min_length=1, description=(
        "Input tensors; names unique, each as the model's metadata declares it."))
    outputs: list[V2RequestedOutput] | None = Field(
        None, description="Outputs to return (default: all); names unique.")
    parameters: V2Parameters | None = Field(None, description="Timeshare's request options.")


class V2OutputTensor(BaseModel):
    name: str = Field(..., description="Output name.")
    datatype: Datatype = Field(..., description="Element type.")  # type: ignore[valid-type]
    shape: list[int] = Field(..., description="Dims, batch first.")
    data: list[Any] | None = Field(None, description="Values, flat, row-major (JSON outputs).")
    parameters: dict[str, Any] | None = Field(
        None, description="binary_data_size: bytes of this output in the binary section.")


class V2InferResponse(BaseModel):
    model_name: str = Field(..., description="The model (or route) asked for.")
    model_version: str = Field(..., description="The version that answered ('' for rules).")
    id: str | None = Field(None, description="The request's id, echoed.")
    outputs: list[V2OutputTensor] = Field(..., description="Output tensors.")
    parameters: dict[str, Any] = Field(..., description=(
        "served_by, degraded, reason, cache, queue_ms, compute_ms, total_ms, caller, "
        "caller_verified, and where they apply quota, similarity, route."))


class RepositoryRow(BaseModel):
    name: str = Field(..., description="Model name.")
    version: str = Field(..., description="Version ('' for a model-level row).")
    state: str = Field(..., description="READY, LOADING, FAILED, UNAVAILABLE, UNLOADED...")
    reason: str | None = Field(None, description="Why it is not ready, when known.")


class LoadAnswer(BaseModel):
    name: str = Field(..., description="Model name.")
    state: Literal["READY", "UNLOADED"] = Field(..., description="Its state now.")
    default_version: str | None = Field(None, description="The version answering by default.")


class PublishAnswer(BaseModel):
    name: str = Field(..., description="Model name.")
    version: str = Field(..., description="Version published or retired.")
    state: Literal["PUBLISHED", "RETIRED"] = Field(..., description="What was done.")
    files: list[str] | None = Field(None, description="Files written (publish).")
    bytes: int | None = Field(None, description="Bytes written (publish).")
    new_model: bool | None = Field(None, description="The first version of this model.")


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with its ``$defs`` references inlined (it is embedded in the OpenAPI doc)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return walk(defs[ref.removeprefix("#/$defs/")])
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(schema)


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return _inline(model.model_json_schema())


BINARY_EXTENSION: dict[str, Any] = {
    "header": "Inference-Header-Content-Length",
    "description": (
        "Triton's binary tensor extension (what tritonclient.http sends by default): the body "
        "is a JSON header of Inference-Header-Content-Length bytes, then the tensors' bytes in "
        "input order (any Content-Type). In the header an input has parameters.binary_data_size "
        "(its bytes: elements x datatype size) instead of data. Outputs asked with "
        "parameters.binary_data (or parameters.binary_data_output) come back the same way: "
        "Content-Type application/octet-stream with the same header. infer_stream takes JSON "
        "only."),
    "json_header_schema": {
        "type": "object", "required": ["inputs"],
        "properties": {"inputs": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["name", "shape", "datatype", "parameters"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "datatype": {"enum": list(DTYPES)},
                "parameters": {"type": "object", "required": ["binary_data_size"],
                               "properties": {"binary_data_size": {"type": "integer",
                                                                   "minimum": 0}}}}}}},
    },
}

_TENSORS_MATCH = (
    "The JSON body is the Open Inference Protocol request. What JSON Schema cannot say: each "
    "input must match the model's metadata (GET /v2/models/{name}: name, datatype, shape with "
    "-1 for any size) with as many values as its shape holds, and names are unique. An unknown "
    "model, route or version is 404 whatever the JSON holds (the limits on a body's size, "
    "nesting and arrival come first: 413, 400, 408). ")

INFER_BODY: dict[str, Any] = {
    "description": _TENSORS_MATCH + "Large tensors: the binary extension, "
                   "x-timeshare-binary-tensor-data.",
    "requestBody": {"required": True,
                    "content": {_JSON: {"schema": _schema(V2InferRequest)}}},
    "x-timeshare-binary-tensor-data": BINARY_EXTENSION,
}

STREAM_BODY: dict[str, Any] = {
    "description": _TENSORS_MATCH + "Server-sent events: one data event per answer (the fast, "
                   "then the refined one); a later answer's error is an 'error' event.",
    "requestBody": {"required": True,
                    "content": {_JSON: {"schema": _schema(V2InferRequest)}}},
}

_RETRY = {"Retry-After": {"description": "Seconds to wait before retrying (overload, quota).",
                          "schema": {"type": "integer", "minimum": 0}}}
_ERRORS: dict[int, dict[str, Any]] = {
    400: {"description": "Invalid request; the body names the field."},
    401: {"description": "Missing or unknown key."},
    403: {"description": "The key does not allow this caller."},
    404: {"description": "Unknown model, route or version, or none of its versions is ready."},
    408: {"description": "The body arrived too slowly."},
    409: {"description": "Conflicts with what the repository holds."},
    413: {"description": "Body or tensors over the limit."},
    415: {"description": "Content-Type not taken here."},
    422: {"description": "The archive is well formed but its model is not usable."},
    429: {"description": "Caller over its quota.", "headers": _RETRY},
    500: {"description": "A bug; the log has the trace."},
    503: {"description": "Overloaded (retry after Retry-After) or no answer could be produced. "
                         "Behind Ray Serve's port, Serve's proxy may answer this itself, as "
                         "text, when its queue is full.", "headers": _RETRY,
          "content": {_JSON: {"schema": {"$ref": "#/components/schemas/ErrorBody"}},
                      "text/plain": {"schema": {"type": "string"}}}},
    504: {"description": "Deadline passed with no fallback."},
}


def responses(success: Mapping[int, dict[str, Any]], *errors: int,
              error_model: type[BaseModel] = ErrorBody) -> dict[int | str, dict[str, Any]]:
    """A route's declared answers: ``success`` (status -> FastAPI response dict, see
    :func:`ok`) and the error statuses it can answer, each in the app's error shape
    (``error_model``), plus 500 (the crash handler's, in the plain error shape)."""
    out: dict[int | str, dict[str, Any]] = {}
    for status, answer in success.items():
        out[status] = answer
    for status in sorted(errors):
        out[status] = {"model": error_model, **_ERRORS[status]}
    out[500] = {"model": ErrorBody, **_ERRORS[500]}  # the crash handler's body, on any route
    return out


def ok(model: type[BaseModel] | None = None, description: str = "OK",
       content: dict[str, Any] | None = None) -> dict[str, Any]:
    """One success answer for :func:`responses`: a JSON ``model``, or explicit ``content``."""
    out: dict[str, Any] = {"description": description}
    if model is not None:
        out["model"] = model
    if content is not None:
        out["content"] = content
    return out


INFER_OK = {200: ok(V2InferResponse, "The answer (labelled when degraded).", content={
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"},
                                 "x-timeshare-binary-tensor-data": BINARY_EXTENSION}})}
STREAM_OK = {200: ok(description="Server-sent events, each data: a v2 infer response.",
                     content={"text/event-stream": {"schema": {"type": "string"}}})}
INFER_ERRORS = (400, 401, 403, 404, 408, 413, 429, 503, 504)
REPOSITORY_INDEX_OK = {200: ok(description="Every model version and its state.", content={
    _JSON: {"schema": {"type": "array", "items": _schema(RepositoryRow)}}})}

SECURITY_SCHEMES: dict[str, Any] = {
    "bearerKey": {"type": "http", "scheme": "bearer",
                  "description": "The operator key (api_key), or a caller key on infer."},
    "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key",
                     "description": "The same key, as a header."},
}
ADMIN_SECURITY: list[dict[str, list[str]]] = [{"bearerKey": []}, {"apiKeyHeader": []}]


def finish_openapi(spec: dict[str, Any], *, secured: set[tuple[str, str]]) -> dict[str, Any]:
    """The generated document, made exact: no 422 (validation errors are 400s, declared), no
    empty JSON answer FastAPI adds beside a declared one (infer_stream's events), the
    path parameters' limits (``MAX_NAME_CHARS``; the publish pattern), and the operator key's
    security on the operations in ``secured`` (``(METHOD, path)``)."""
    spec.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
    for name in ("HTTPValidationError", "ValidationError"):
        spec["components"].get("schemas", {}).pop(name, None)
    for path, item in spec.get("paths", {}).items():
        for method, op in item.items():
            answers = op.get("responses", {})
            if answers.get("422", {}).get("description") == "Validation Error":  # FastAPI's
                del answers["422"]
            for answer in answers.values():  # FastAPI's default JSON beside declared content
                content = answer.get("content", {})
                if len(content) > 1 and content.get(_JSON) == {"schema": {}}:
                    del content[_JSON]
            for param in op.get("parameters", ()):
                if param.get("in") != "path":
                    continue
                schema = param.setdefault("schema", {"type": "string"})
                if path.startswith("/v2/repository/models/{name}/versions/"):
                    schema["pattern"] = f"^{NAME_PATTERN}$"
                else:
                    schema["maxLength"] = MAX_NAME_CHARS
            if (method.upper(), path) in secured:
                op["security"] = ADMIN_SECURITY
    return spec
