"""OpenAPI declarations of the v2 HTTP API: request bodies and the error shape.

The infer routes decode their bodies by hand (``router.v2``: JSON or JSON + binary tensors), so
FastAPI cannot infer a schema from a signature; these models declare it, for clients and for
schema-based fuzzers. They document; they do not validate.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from pool.config import DTYPES

__all__ = ["ErrorBody", "ERROR_RESPONSES", "INFER_BODY", "V2InferRequest"]

Datatype = Literal[tuple(DTYPES)]  # type: ignore[valid-type]


class ErrorBody(BaseModel):
    """Every error the app returns, whatever its status."""

    error: str = Field(..., description="What is wrong, naming the field and the expectation.")
    type: str = Field(..., description="Error class, e.g. InvalidRequest, ModelNotFound.")
    field: str | None = Field(None, description="The request field at fault, when one is.")


class V2InputTensor(BaseModel):
    name: str = Field(..., min_length=1)
    shape: list[int] = Field(..., description="Non-negative dims, batch first.")
    datatype: Datatype  # type: ignore[valid-type]
    data: list[Any] | None = Field(None, description="Values, flat or nested, row-major.")
    parameters: dict[str, Any] | None = Field(
        None, description="binary_data_size: bytes of this tensor in the binary section.")


class V2RequestedOutput(BaseModel):
    name: str
    parameters: dict[str, Any] | None = Field(None, description="binary_data: bool.")


class V2InferRequest(BaseModel):
    """Open Inference Protocol request; Timeshare options travel in ``parameters``."""

    id: str | None = Field(None, description="Echoed back; never an identity.")
    inputs: list[V2InputTensor] = Field(..., min_length=1)
    outputs: list[V2RequestedOutput] | None = None
    parameters: dict[str, Any] | None = Field(
        None, description="priority (str), deadline_ms (number > 0), caller (str), text (str), "
        "cache_skip_read / cache_skip_write / binary_data_output (bool), timeout (us).")


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


INFER_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": _inline(V2InferRequest.model_json_schema())},
            "application/octet-stream": {"schema": {
                "type": "string", "format": "binary",
                "description": "JSON header of Inference-Header-Content-Length bytes, then the "
                               "binary tensors"}},
        },
    }
}

_ERR = {"model": ErrorBody}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {**_ERR, "description": "Invalid request; the body names the field."},
    401: {**_ERR, "description": "Missing or unknown key."},
    403: {**_ERR, "description": "The key does not allow this caller."},
    404: {**_ERR, "description": "Unknown model, route, version or path."},
    413: {**_ERR, "description": "Body or tensors over the limit."},
    429: {**_ERR, "description": "Caller over its quota."},
    503: {**_ERR, "description": "No answer could be produced."},
    504: {**_ERR, "description": "Deadline passed with no fallback."},
}
