"""Safe serialisation of cached answers (no pickle).

Layout: ``b"TSRC1"`` magic, a little-endian u32 header length, a JSON header, then each output's
raw C-contiguous bytes in header order. Only numeric/bool dtypes are accepted, so decoding can
never build arbitrary objects. Decoded arrays are read-only zero-copy views of the payload.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from router.cache._private.keys import canonical_array
from router.cache.types import CachedAnswer

_MAGIC = b"TSRC1"
_ALLOWED_KINDS = frozenset("biufc")  # bool, int, uint, float, complex


class CodecError(ValueError):
    """A payload is not a valid encoded answer (corrupt, foreign or unsupported dtype)."""


def encode(answer: CachedAnswer, *, created_at: float) -> bytes:
    """Encode ``answer``; raises ``CodecError`` naming an output whose dtype is not numeric."""
    specs: list[dict[str, Any]] = []
    blobs: list[bytes] = []
    for name, value in answer.outputs.items():
        arr = canonical_array(np.asarray(value))
        if arr.dtype.kind not in _ALLOWED_KINDS:
            raise CodecError(f"outputs.{name}: dtype {arr.dtype} cannot be cached")
        specs.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape)})
        blobs.append(arr.tobytes())
    header = json.dumps(
        {
            "served_by": answer.served_by,
            "version": answer.version,
            "created_at": created_at,
            "outputs": specs,
        },
        separators=(",", ":"),
    ).encode()
    return b"".join([_MAGIC, struct.pack("<I", len(header)), header, *blobs])


def decode(payload: bytes) -> tuple[CachedAnswer, float]:
    """Decode a payload into ``(answer, created_at)``; raises ``CodecError`` when invalid."""
    buf = memoryview(payload)
    if bytes(buf[: len(_MAGIC)]) != _MAGIC or len(buf) < len(_MAGIC) + 4:
        raise CodecError("not a cached answer (bad magic)")
    (hlen,) = struct.unpack_from("<I", buf, len(_MAGIC))
    start = len(_MAGIC) + 4
    try:
        header = json.loads(bytes(buf[start : start + hlen]))
        offset = start + hlen
        outputs: dict[str, np.ndarray] = {}
        for spec in header["outputs"]:
            dtype = np.dtype(str(spec["dtype"]))
            if dtype.kind not in _ALLOWED_KINDS:
                raise CodecError(f"outputs.{spec['name']}: dtype {dtype} not allowed")
            shape = tuple(int(d) for d in spec["shape"])
            count = int(np.prod(shape, dtype=np.int64))
            size = count * dtype.itemsize
            if offset + size > len(buf):
                raise CodecError(f"outputs.{spec['name']}: payload truncated")
            arr = np.frombuffer(buf, dtype=dtype, count=count, offset=offset).reshape(shape)
            outputs[str(spec["name"])] = arr
            offset += size
        if offset != len(buf):
            raise CodecError("trailing bytes after the last output")
        answer = CachedAnswer(
            outputs=outputs, served_by=str(header["served_by"]), version=header["version"]
        )
        return answer, float(header["created_at"])
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, CodecError):
            raise
        raise CodecError(f"corrupt cached answer header ({e})") from None
