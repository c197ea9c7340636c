"""Canonical cache keys.

A key names (model, version, inputs) exactly: inputs are encoded with sorted names, each array's
dtype (little-endian spelling), shape and C-contiguous bytes, so ``[1, 2]`` as int64 and as float32
get different keys, and a new model version never reads an old version's entries.

Digests of inputs that cannot change are remembered by the arrays' identity: a repeated body's
inputs are the same read-only arrays every time (``router.decode_memo``), and hashing them again
was about 6 % of a cache hit's CPU (docs/PERFORMANCE.md). "Cannot change" is a read-only array
that owns its memory (no writable base to change it through); making such an array writable
again and writing to it is a bug this module does not defend against, as the decode memo does
not. The remembered arrays are held, so an identity is never reused while it is remembered.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

_KEY_SCHEMA = b"ts-rc-1"  # bump when the encoding changes so old entries are never read


def _field(h: Any, data: bytes | memoryview) -> None:
    # Length-prefix every field so no two different inputs share an encoding.
    h.update(struct.pack("<Q", len(data)))
    h.update(data)


def canonical_array(arr: np.ndarray) -> np.ndarray:
    """The array as encoded in keys and values: C-contiguous, little-endian (or byte-sized)."""
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and not _little_endian_host()):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.ascontiguousarray(arr)


def _little_endian_host() -> bool:
    return np.little_endian


# Remembered digests: (model, version, names..., ids...) -> (the arrays, digest); oldest out first
_IMMUTABLE_DIGESTS: dict[tuple[Any, ...], tuple[tuple[np.ndarray, ...], str]] = {}
IMMUTABLE_DIGESTS_MAX = 1024
IMMUTABLE_MAX_BYTES = 64 * 1024  # larger arrays are hashed every time (not held)


def _immutable(arr: Any) -> bool:
    if type(arr) is not np.ndarray or arr.nbytes > IMMUTABLE_MAX_BYTES:
        return False
    flags = arr.flags
    return not flags.writeable and flags.owndata


def input_digest(model: str, version: str, inputs: Mapping[str, np.ndarray]) -> str:
    """Hex blake2b-256 digest of model, version and the canonical encoding of ``inputs``
    (remembered for inputs that cannot change; see the module's docstring)."""
    names = sorted(inputs)
    arrays = tuple(inputs[n] for n in names)
    for arr in arrays:
        if not _immutable(arr):
            return _digest(model, version, inputs)
    key = (model, version, *names, *map(id, arrays))
    found = _IMMUTABLE_DIGESTS.get(key)
    if found is not None:
        return found[1]
    digest = _digest(model, version, inputs)
    while len(_IMMUTABLE_DIGESTS) >= IMMUTABLE_DIGESTS_MAX:
        _IMMUTABLE_DIGESTS.pop(next(iter(_IMMUTABLE_DIGESTS)), None)
    _IMMUTABLE_DIGESTS[key] = (arrays, digest)
    return digest


def _digest(model: str, version: str, inputs: Mapping[str, np.ndarray]) -> str:
    h = hashlib.blake2b(digest_size=32)
    _field(h, _KEY_SCHEMA)
    _field(h, model.encode())
    _field(h, version.encode())
    for name in sorted(inputs):
        arr = canonical_array(np.asarray(inputs[name]))
        _field(h, name.encode())
        _field(h, arr.dtype.str.encode())
        _field(h, struct.pack(f"<{arr.ndim}q", *arr.shape))
        _field(h, arr.data.cast("B") if arr.size else b"")
    return h.hexdigest()


def cache_key(prefix: str, model: str, version: str, inputs: Mapping[str, np.ndarray]) -> str:
    """Full key ``<prefix><model>@<version>:<digest>``.

    Model and version stay readable so operators can find (or delete) one model's entries; the
    digest covers them too, so odd characters in names cannot make two keys collide.
    """
    return f"{prefix}{model}@{version}:{input_digest(model, version, inputs)}"
