"""Check a request's tensors against the model's config (the Accept step).

Every failure names the field and the expectation, e.g.
``inputs.pixels: expected shape [batch, 64], got [1, 63]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pool.config import ModelConfig
from router.errors import InvalidRequest, PayloadTooLarge

__all__ = ["cast_checked", "output_dtypes", "validate_inputs"]


def _fmt_shape(dims: tuple[int, ...]) -> str:
    if not dims:
        return "[batch]"
    return "[batch, " + ", ".join("*" if d == -1 else str(d) for d in dims) + "]"


def cast_checked(arr: np.ndarray, want: np.dtype, field: str, wire: str) -> np.ndarray:
    """``arr`` as dtype ``want`` (wire name ``wire``), refusing every lossy or silent change.

    The one dtype check of the request path (v2 decoder and handle API alike): booleans only
    for BOOL, no booleans for numbers, no floats for integers, integers within the target's
    range (UINT8 300 would wrap to 44), and no cross-kind casts numpy calls unsafe.
    """
    got = arr.dtype
    if got == want:
        return arr
    if want.kind == "b" or got.kind == "b":
        what = "booleans (true/false)" if want.kind == "b" else "numbers, not booleans"
        raise InvalidRequest(f"{field}: expected dtype {wire} ({what}), got {got}", field=field)
    if want.kind in "iu":
        if got.kind not in "iu":
            raise InvalidRequest(f"{field}: expected dtype {wire} (integers), got {got}",
                                 field=field)
        info = np.iinfo(want)
        if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
            raise InvalidRequest(
                f"{field}: expected dtype {wire} values in [{info.min}, {info.max}], got "
                f"[{int(arr.min())}, {int(arr.max())}]", field=field)
        return arr.astype(want)
    if not np.can_cast(got, want, casting="same_kind"):
        raise InvalidRequest(f"{field}: expected dtype {wire} ({want}), got {got}", field=field)
    return arr.astype(want)


def _check_shape(arr: np.ndarray, shape: tuple[int, ...], field: str) -> None:
    """A batch of ``shape`` (``-1`` = any size in that dimension), or InvalidRequest."""
    if arr.ndim != len(shape) + 1:
        raise InvalidRequest(
            f"{field}: expected rank {len(shape) + 1} with shape {_fmt_shape(shape)}, "
            f"got shape {list(arr.shape)}", field=field)
    for want_d, got_d in zip(shape, arr.shape[1:], strict=True):
        if want_d != -1 and want_d != got_d:
            raise InvalidRequest(
                f"{field}: expected shape {_fmt_shape(shape)}, got {list(arr.shape)}",
                field=field)


@dataclass(frozen=True, slots=True)
class _Input:
    """One declared input, in the form the checks use (built once per config)."""

    name: str
    dtype: np.dtype
    wire: str
    shape: tuple[int, ...]
    field: str


# The checks' view of each config, by identity (the config is held, so its id stays its own).
# Bounded: configs change only when a model is (re)loaded; the whole map is rebuilt if it fills.
_PLANS: dict[int, tuple[ModelConfig, frozenset[str], tuple[_Input, ...],
                        dict[str, np.dtype]]] = {}
_MAX_PLANS = 1024


def _plan(config: ModelConfig) -> tuple[ModelConfig, frozenset[str], tuple[_Input, ...],
                                        dict[str, np.dtype]]:
    found = _PLANS.get(id(config))
    if found is None or found[0] is not config:
        specs = tuple(_Input(t.name, np.dtype(t.numpy_dtype), t.dtype, tuple(t.shape),
                             f"inputs.{t.name}") for t in config.inputs)
        outputs = {t.name: np.dtype(t.numpy_dtype) for t in config.outputs}
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        found = _PLANS[id(config)] = (config, frozenset(t.name for t in specs), specs, outputs)
    return found


def output_dtypes(config: ModelConfig) -> Mapping[str, np.dtype]:
    """The config's declared output dtypes by name (built once per config; do not modify)."""
    return _plan(config)[3]


def _name_error(config: ModelConfig, inputs: Mapping[str, np.ndarray]) -> InvalidRequest:
    expected = {t.name for t in config.inputs}
    unknown = sorted(set(inputs) - expected)
    what, name = ("unknown", unknown[0]) if unknown else (
        "missing", sorted(expected - set(inputs))[0])
    return InvalidRequest(f"inputs.{name}: {what} input for model {config.name!r}; expected "
                          f"{sorted(expected)}", field=f"inputs.{name}")


# ndarray.all() without its Python wrapper (numpy's _methods._all): once per input per request
_all = np.logical_and.reduce


def validate_inputs(config: ModelConfig, inputs: Mapping[str, np.ndarray]
                    ) -> dict[str, np.ndarray]:
    """Return the inputs cast to the config's dtypes, or raise InvalidRequest/PayloadTooLarge.

    The arrays returned are C-contiguous and writable, so a model may compute in place: a
    read-only input (a remembered body's, ``router.decode_memo``; one Ray mapped from its object
    store) is copied."""
    _, names, specs, _ = _plan(config)
    if inputs.keys() != names:
        raise _name_error(config, inputs)
    total = sum(a.nbytes for a in inputs.values())
    if total > config.max_input_bytes:
        raise PayloadTooLarge(
            f"inputs: {total} bytes exceeds the limit of {config.max_input_bytes} bytes for "
            f"model {config.name!r}",
            field="inputs",
        )
    out: dict[str, np.ndarray] = {}
    batch: int | None = None
    for spec in specs:
        field = spec.field
        arr = cast_checked(inputs[spec.name], spec.dtype, field, spec.wire)
        _check_shape(arr, spec.shape, field)
        n = arr.shape[0]
        if n < 1:
            raise InvalidRequest(f"{field}: batch must hold at least 1 item, got 0", field=field)
        if n > config.max_batch_size:
            raise InvalidRequest(
                f"{field}: batch of {n} exceeds max_batch_size {config.max_batch_size} of model "
                f"{config.name!r}",
                field=field,
            )
        if batch is not None and n != batch:
            raise InvalidRequest(
                f"{field}: batch size {n} differs from the other inputs' {batch}", field=field
            )
        batch = n
        if arr.dtype.kind == "f" and not _all(np.isfinite(arr), axis=None):
            raise InvalidRequest(f"{field}: expected finite numbers, got NaN or inf", field=field)
        out[spec.name] = (np.ascontiguousarray(arr) if arr.flags.writeable
                          else np.array(arr, order="C"))
    return out
