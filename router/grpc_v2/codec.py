"""Open Inference Protocol gRPC codec: ``ModelInferRequest`` in, ``ModelInferResponse`` out.

The gRPC twin of ``router.v2``'s HTTP codec. A request decodes into the same
``DecodedRequest`` (tensors as numpy arrays, ``parameters`` as a plain dict, requested outputs),
so ``router.http_infer.request_from_v2`` builds the same ``InferenceRequest`` from it, with the
same parameter names and checks, whichever protocol it came by.

Tensors arrive either as ``raw_input_contents`` (little-endian bytes, one entry per input in
order: what ``tritonclient.grpc`` sends) or as typed ``contents`` (the repeated field of the
datatype); the answer uses the form the request used, except that FP16 outputs are always raw
(the protocol has no typed field for them). Every error names the field at fault.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pool.config import DTYPES
from router.errors import InvalidRequest
from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb
from router.schemas import InferenceResponse
from router.v2 import DecodedRequest, check_requested, response_parameters, wire_dtype
from router.validation import cast_checked

__all__ = ["decode_model_infer", "encode_model_infer", "metadata_response", "parameters_dict"]

# The typed ``InferTensorContents`` field of each datatype (none for FP16: raw only).
_CONTENTS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
             "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
             "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
             "FP32": "fp32_contents", "FP64": "fp64_contents"}
_CONTENT_FIELDS = tuple(f.name for f in pb.InferTensorContents.DESCRIPTOR.fields)
# numpy dtypes of the wire names, little-endian as the protocol's raw bytes are
_LE = {name: np.dtype(np_name).newbyteorder("<") for name, np_name in DTYPES.items()}


def _bad(msg: str, field: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {msg}", field=field)


def parameters_dict(params: Any, where: str) -> dict[str, Any]:
    """A protobuf ``map<string, InferParameter>`` as a plain dict of Python values."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        kind = value.WhichOneof("parameter_choice")
        if kind is None:
            raise _bad("no value set", f"{where}.{key}")
        out[key] = getattr(value, kind)
    return out


def decode_model_infer(request: pb.ModelInferRequest) -> tuple[DecodedRequest, bool]:
    """The decoded request and whether it sent raw tensors (its answer then does too)."""
    if not request.inputs:
        raise _bad("expected a non-empty list of input tensors", "inputs")
    raw = list(request.raw_input_contents)
    if raw and len(raw) != len(request.inputs):
        raise _bad(f"{len(raw)} entries for {len(request.inputs)} inputs",
                   "raw_input_contents")
    inputs: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(request.inputs):
        name = tensor.name
        if not name:
            raise _bad("expected a non-empty string", f"inputs[{i}].name")
        if name in inputs:
            raise _bad("given twice", f"inputs.{name}")
        inputs[name] = _decode_tensor(tensor, raw[i] if raw else None)
    outputs = None
    if request.outputs:
        names = []
        for j, o in enumerate(request.outputs):
            if not o.name:
                raise _bad("expected a non-empty string", f"outputs[{j}].name")
            names.append(o.name)
        if len(set(names)) != len(names):
            raise _bad("an output name is given twice", "outputs")
        outputs = tuple((n, bool(raw)) for n in names)
    decoded = DecodedRequest(request_id=request.id or None, inputs=inputs,
                             parameters=parameters_dict(request.parameters, "parameters"),
                             outputs=outputs, binary_all=bool(raw))
    return decoded, bool(raw)


def _decode_tensor(tensor: Any, raw: bytes | None) -> np.ndarray:
    where = f"inputs.{tensor.name}"
    shape = list(tensor.shape)
    if any(d < 0 for d in shape):
        raise _bad(f"expected non-negative dimensions, got {shape}", f"{where}.shape")
    datatype = tensor.datatype
    if datatype not in DTYPES:
        raise _bad(f"expected one of {', '.join(DTYPES)}, got {datatype!r}", f"{where}.datatype")
    dtype = _LE[datatype]
    count = math.prod(shape)  # Python ints: no overflow for [2**32, 2**32]
    given = [f for f in _CONTENT_FIELDS if len(getattr(tensor.contents, f))]
    if raw is not None:
        if given:
            raise _bad("must not be given with raw_input_contents", f"{where}.contents")
        if len(raw) != count * dtype.itemsize:
            raise _bad(f"expected {count * dtype.itemsize} bytes for shape {shape} {datatype}, "
                       f"got {len(raw)}", f"{where} raw_input_contents")
        if dtype.kind == "b" and raw.translate(None, b"\x00\x01"):
            raise _bad("BOOL bytes must be 0 or 1", f"{where} raw_input_contents")
        return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True
                                                      ).reshape(shape)
    want = _CONTENTS.get(datatype)
    if want is None:
        raise _bad(f"{datatype} travels as raw_input_contents only", f"{where}.contents")
    if any(g != want for g in given):
        raise _bad(f"datatype {datatype} takes contents.{want}, got "
                   f"{', '.join('contents.' + g for g in given)}", f"{where}.contents")
    values = getattr(tensor.contents, want)
    if len(values) != count:
        raise _bad(f"holds {len(values)} values, shape {shape} needs {count}",
                   f"{where}.contents")
    arr: np.ndarray = np.array(values, dtype=_CONTENT_DTYPES[want])
    return cast_checked(arr.reshape(shape), dtype.newbyteorder("="), f"{where}.contents",
                        datatype)


# the numpy dtype each typed field's values read as (then cast, range-checked, to the datatype)
_CONTENT_DTYPES = {"bool_contents": np.bool_, "int_contents": np.int64,
                   "int64_contents": np.int64, "uint_contents": np.uint64,
                   "uint64_contents": np.uint64, "fp32_contents": np.float32,
                   "fp64_contents": np.float64}


def _set_parameter(param: Any, value: Any) -> None:
    if isinstance(value, bool):
        param.bool_param = value
    elif isinstance(value, int):
        param.int64_param = value
    elif isinstance(value, float):
        param.double_param = value
    else:
        param.string_param = str(value)


def encode_model_infer(response: InferenceResponse, decoded: DecodedRequest, *,
                       raw: bool) -> pb.ModelInferResponse:
    """The answer with Timeshare's labels as ``parameters`` (the same as over HTTP)."""
    wanted = None if decoded.outputs is None else [n for n, _ in decoded.outputs]
    if wanted is not None:
        check_requested(wanted, response)
    names = wanted if wanted is not None else list(response.outputs)
    arrays = [np.ascontiguousarray(response.outputs[n]) for n in names]
    raw = raw or any(wire_dtype(a) not in _CONTENTS for a in arrays)
    out = pb.ModelInferResponse(model_name=response.model, model_version=response.version or "",
                                id=decoded.request_id or "")
    for name, arr in zip(names, arrays, strict=True):
        datatype = wire_dtype(arr)
        tensor = out.outputs.add(name=name, datatype=datatype, shape=arr.shape)
        if raw:
            out.raw_output_contents.append(arr.astype(_LE[datatype], copy=False).tobytes())
        else:
            getattr(tensor.contents, _CONTENTS[datatype]).extend(arr.reshape(-1).tolist())
    for key, value in response_parameters(response).items():
        _set_parameter(out.parameters[key], value)
    return out


def metadata_response(meta: dict[str, Any]) -> pb.ModelMetadataResponse:
    """``router.v2.model_metadata``'s dict (or a route's) as the protobuf answer."""
    out = pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"],
                                   platform=meta["platform"])
    for kind in ("inputs", "outputs"):
        for t in meta[kind]:
            getattr(out, kind).add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
    return out
