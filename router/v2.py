"""Open Inference Protocol (KServe v2 / Triton) HTTP codec.

Supports the JSON tensor format and Triton's binary tensor extension (the
``Inference-Header-Content-Length`` header; ``binary_data_size`` per input; ``binary_data`` per
requested output or ``binary_data_output`` for all), which ``tritonclient.http`` uses by default.
Optional Timeshare fields travel in the request ``parameters``: priority, deadline_ms, caller,
text, cache_skip_read, cache_skip_write (Triton's ``timeout`` in microseconds is read as a
deadline when deadline_ms is absent).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import orjson

from pool.config import DTYPES, ModelConfig
from router.errors import InvalidRequest
from router.schemas import InferenceResponse
from router.validation import cast_checked

__all__ = ["JSON_HEADERS", "DecodedRequest", "decode_infer_request", "encode_infer_response",
           "model_metadata", "route_metadata", "parse_decimal", "check_bool", "check_requested",
           "response_parameters", "wire_dtype"]

HEADER_LENGTH = "inference-header-content-length"
# keyed by the dtype itself: ``dtype.name`` costs microseconds per call
_NP_TO_WIRE = {np.dtype(v): k for k, v in DTYPES.items()}
_NAME_TO_WIRE = {v: k for k, v in DTYPES.items()}  # any byte order


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    request_id: str | None
    inputs: dict[str, np.ndarray]
    parameters: dict[str, Any]
    outputs: tuple[tuple[str, bool], ...] | None  # (name, binary) requested; None = all
    binary_all: bool


def _loads(head: bytes) -> Any:
    """``json.loads``'s result, through orjson (several times faster on number arrays). What
    orjson refuses and the standard library takes (``NaN`` literals, nesting beyond orjson's
    limit) goes through ``json.loads``, so answers and error messages are the standard
    library's. One difference is kept: an integer literal beyond 64 bits reads as a float (the
    standard library reads a Python int that no tensor dtype holds); either way such a value
    is refused by the shape and dtype checks with a 400 naming the field, or read as the float
    it is for a float tensor."""
    try:
        return orjson.loads(head)
    except orjson.JSONDecodeError:
        return json.loads(head)


def _dumps(doc: dict[str, Any], finite: bool) -> bytes:
    """Compact JSON. orjson writes ``NaN`` and infinities as ``null``; the standard library
    writes them as the ``NaN``/``Infinity`` literals that the JSON clients of the v2 protocol
    (tritonclient, numpy) read back, so outputs holding any take the standard library's path."""
    if finite:
        try:  # numpy scalars in labels (a similarity from the semantic tier) are numbers too
            return orjson.dumps(doc, option=orjson.OPT_SERIALIZE_NUMPY)
        except TypeError:  # anything else orjson does not know: the standard library's path
            pass
    return json.dumps(doc, separators=(",", ":")).encode()


def _bad(msg: str, field: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {msg}", field=field)


def parse_decimal(text: str, field: str) -> int:
    """An ASCII decimal header value (``str.isdigit`` also accepts '²', which ``int`` refuses)."""
    if not (text.isascii() and text.isdigit()):
        raise _bad(f"expected a non-negative integer, got {text!r}", field)
    return int(text)


def check_bool(value: Any, field: str) -> bool:
    """A JSON boolean; ``bool("false")`` is True, so strings and numbers are refused."""
    if not isinstance(value, bool):
        raise _bad(f"expected true or false, got {value!r}", field)
    return value


def _params(item: dict[str, Any], field: str) -> dict[str, Any]:
    params = item.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise _bad(f"expected an object, got {type(params).__name__}", field)
    return params


def decode_infer_request(body: bytes, header_length: int | None) -> DecodedRequest:
    """Parse a v2 infer request body; raise InvalidRequest naming the field."""
    try:
        return _decode(body, header_length)
    except RecursionError:
        # json and numpy recurse per nesting level; a deeply nested body is bad input, not a 500.
        raise _bad("nested too deeply", "body") from None


def _decode(body: bytes, header_length: int | None) -> DecodedRequest:
    if header_length is not None:
        if header_length < 0 or header_length > len(body):
            raise _bad(f"must be between 0 and the body size {len(body)}, got {header_length}",
                       "Inference-Header-Content-Length")
        head, binary = body[:header_length], memoryview(body)[header_length:]
    else:
        head, binary = body, memoryview(b"")
    try:
        doc = _loads(head)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _bad(f"malformed JSON ({e})", "body") from None
    if not isinstance(doc, dict):
        raise _bad(f"expected a JSON object, got {type(doc).__name__}", "body")
    params = _params(doc, "parameters")
    raw_inputs = doc.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise _bad("expected a non-empty list of input tensors", "inputs")
    inputs: dict[str, np.ndarray] = {}
    offset = 0
    for i, item in enumerate(raw_inputs):
        arr, used = _decode_tensor(item, i, binary[offset:])
        offset += used
        if item["name"] in inputs:
            raise _bad("given twice", f"inputs.{item['name']}")
        inputs[item["name"]] = arr
    if offset != len(binary):
        raise _bad(f"{len(binary) - offset} trailing bytes not claimed by any input",
                   "binary data")
    outputs = None
    if doc.get("outputs") is not None:
        if not isinstance(doc["outputs"], list):
            raise _bad("expected a list", "outputs")
        outs = []
        for j, o in enumerate(doc["outputs"]):
            if not isinstance(o, dict) or not isinstance(o.get("name"), str):
                raise _bad("expected an object with a string 'name'", f"outputs[{j}]")
            where = f"outputs.{o['name']}.parameters"
            binary_data = _params(o, where).get("binary_data", False)
            outs.append((o["name"], check_bool(binary_data, f"{where}.binary_data")))
        if len({name for name, _ in outs}) != len(outs):
            raise _bad("an output name is given twice", "outputs")
        outputs = tuple(outs)
    rid = doc.get("id")
    return DecodedRequest(
        request_id=str(rid) if rid is not None else None,
        inputs=inputs,
        parameters=params,
        outputs=outputs,
        binary_all=check_bool(params.get("binary_data_output", False),
                              "parameters.binary_data_output"),
    )


def _decode_tensor(item: Any, i: int, binary: memoryview) -> tuple[np.ndarray, int]:
    where = f"inputs[{i}]"
    if not isinstance(item, dict):
        raise _bad("expected an object with name, shape, datatype, data", where)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise _bad("expected a non-empty string", f"{where}.name")
    where = f"inputs.{name}"
    shape = item.get("shape")
    if (not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool)
                                                and d >= 0 for d in shape)):
        raise _bad(f"expected a list of non-negative integers, got {shape!r}", f"{where}.shape")
    datatype = item.get("datatype")
    if not isinstance(datatype, str) or datatype not in DTYPES:  # a list is unhashable
        raise _bad(f"expected one of {', '.join(DTYPES)}, got {datatype!r}", f"{where}.datatype")
    dtype = np.dtype(DTYPES[datatype])
    count = math.prod(shape)  # Python ints: [2**32, 2**32] must not overflow
    size = _params(item, f"{where}.parameters").get("binary_data_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size != count * dtype.itemsize:
            raise _bad(f"expected {count * dtype.itemsize} bytes for shape {shape} "
                       f"{datatype}, got {size!r}", f"{where}.parameters.binary_data_size")
        if size > len(binary):
            raise _bad(f"needs {size} bytes, only {len(binary)} remain", f"{where} binary data")
        raw = binary[:size]
        if dtype.kind == "b" and bytes(raw).translate(None, b"\x00\x01"):
            raise _bad("BOOL bytes must be 0 or 1", f"{where} binary data")
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy(), size
    if "data" not in item:
        raise _bad("missing (or give parameters.binary_data_size)", f"{where}.data")
    data = item["data"]
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError):
        raise _bad("expected a (nested) list of numbers", f"{where}.data") from None
    if arr.dtype == object or arr.dtype.kind not in "biuf":
        raise _bad(f"expected numbers for datatype {datatype}, got non-numeric values",
                   f"{where}.data")
    if arr.size != count:
        raise _bad(f"holds {arr.size} values, shape {shape} needs {count}", f"{where}.data")
    return cast_checked(arr.reshape(shape), dtype, f"{where}.data", datatype), 0


_SMALL = 256  # up to this many floats, summing the list beats numpy's per-call overhead


def _all_finite(arr: np.ndarray, data: list[Any]) -> bool:
    """No NaN or infinity in ``arr`` (``data``: its values as a list). A small real array is
    summed: any NaN or infinity makes the sum non-finite (a finite sum that overflows reads as
    non-finite too, and only sends the answer down the standard library's path)."""
    if arr.dtype.kind == "f" and len(data) <= _SMALL:
        return math.isfinite(sum(data))
    return bool(np.isfinite(arr).all())


def check_requested(wanted: Any, response: InferenceResponse) -> None:
    """Every output name in ``wanted`` is one the answer holds, else InvalidRequest naming it."""
    missing = sorted(set(wanted) - set(response.outputs))
    if missing:
        raise _bad(f"unknown output; available {sorted(response.outputs)}",
                   f"outputs.{missing[0]}")


def wire_dtype(arr: np.ndarray) -> str:
    """The v2 datatype name of ``arr``'s dtype (FP32 for one the protocol has no name for)."""
    return _NP_TO_WIRE.get(arr.dtype) or _NAME_TO_WIRE.get(arr.dtype.name, "FP32")


# The headers of every all-JSON answer: one shared mapping, read-only (a caller that adds
# headers copies it first)
JSON_HEADERS: Mapping[str, str] = MappingProxyType({"content-type": "application/json"})


def encode_infer_response(
    response: InferenceResponse, decoded: DecodedRequest
) -> tuple[bytes, Mapping[str, str]]:
    """Build the v2 response body (JSON, or JSON header + binary tensors) and headers."""
    wanted = dict(decoded.outputs) if decoded.outputs is not None else None
    if wanted is not None:
        check_requested(wanted, response)
    outs, blobs = [], []
    finite = True
    for name, value in response.outputs.items():
        if wanted is not None and name not in wanted:
            continue
        arr = np.ascontiguousarray(value)
        entry: dict[str, Any] = {"name": name, "datatype": wire_dtype(arr),
                                 "shape": list(arr.shape)}
        if (wanted[name] if wanted is not None else decoded.binary_all):
            blob = arr.tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = data = arr.reshape(-1).tolist()
            if arr.dtype.kind in "fc" and finite:
                finite = _all_finite(arr, data)
        outs.append(entry)
    doc: dict[str, Any] = {
        "model_name": response.model,
        "model_version": response.version or "",
        "outputs": outs,
        "parameters": response_parameters(response),
    }
    if decoded.request_id is not None:
        doc["id"] = decoded.request_id
    head = _dumps(doc, finite)
    if not blobs:
        return head, JSON_HEADERS
    return head + b"".join(blobs), {
        "content-type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(head)),
    }


def response_parameters(response: InferenceResponse) -> dict[str, Any]:
    """Timeshare's labels on a v2 response (degraded, served_by, reason, cache, timings)."""
    params: dict[str, Any] = {
        "served_by": response.served_by,
        "degraded": response.degraded,
        "cache": response.cache,
        "queue_ms": round(response.timings.queue_ms, 3),
        "compute_ms": round(response.timings.compute_ms, 3),
        "total_ms": round(response.timings.total_ms, 3),
        # Who was billed, and whether a caller key proved it ("anonymous" without a key).
        "caller": response.caller,
        "caller_verified": response.caller_verified,
    }
    if response.reason:
        params["reason"] = response.reason
    if response.quota is not None:
        params["quota"] = response.quota
    if response.similarity is not None:
        params["similarity"] = response.similarity
    if response.route is not None:
        params["route"] = response.route.model_dump_json()
    return params


def model_metadata(config: ModelConfig, versions: list[str]) -> dict[str, Any]:
    """``GET /v2/models/{name}``: shapes include the batch dimension as -1 (Triton style)."""
    return {
        "name": config.name,
        "versions": versions,
        "platform": ("pytorch_torchscript" if config.format == "torchscript"
                     else "pytorch_safetensors"),
        "inputs": [{"name": t.name, "datatype": t.dtype, "shape": [-1, *t.shape]}
                   for t in config.inputs],
        "outputs": [{"name": t.name, "datatype": t.dtype, "shape": [-1, *t.shape]}
                    for t in config.outputs],
    }


def route_metadata(name: str, strategy: str, models: list[str], config: ModelConfig
                   ) -> dict[str, Any]:
    """``GET /v2/models/{route}``: a route is a virtual model with the tensors of its models."""
    meta = model_metadata(config, [])
    return {**meta, "name": name, "platform": "timeshare_route",
            "parameters": {"strategy": strategy, "models": models}}
