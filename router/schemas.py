"""Request and response schemas of the handle API (pydantic at the edge).

Tensors travel as numpy arrays. ``InferenceRequest`` accepts numpy arrays, torch tensors or
nested lists for each input and normalises them to numpy; dtype/shape are checked later against
the model's config, which is where the expectation lives.
"""

from __future__ import annotations

import itertools
import os
import uuid
from typing import Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.json_schema import SkipJsonSchema

from policies.priority import Priority, parse_priority

# Request ids: a random 64-bit prefix per process and a counter. Unique across processes and
# restarts like uuid4, without its os.urandom call per request (a hot-path syscall).
_ID_PREFIX = uuid.uuid4().hex[:16]
_ID_COUNTER = itertools.count()


def _reseed_ids() -> None:  # a forked child draws its own prefix
    global _ID_PREFIX, _ID_COUNTER
    _ID_PREFIX, _ID_COUNTER = uuid.uuid4().hex[:16], itertools.count()


os.register_at_fork(after_in_child=_reseed_ids)


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_ID_COUNTER):016x}"


__all__ = [
    "ANONYMOUS",
    "CacheControl",
    "InferenceRequest",
    "InferenceResponse",
    "MAX_REQUESTS_PER_CALL",
    "TRACE_CONTEXT_KEYS",
    "TRACE_VALUE_MAX_CHARS",
    "RouteInfo",
    "Timings",
    "to_numpy",
    "unchecked",
]

_M = TypeVar("_M", bound=BaseModel)
_SET = object.__setattr__


def unchecked(cls: type[_M], values: dict[str, Any]) -> _M:
    """An instance of ``cls`` holding ``values`` as they are, without validation.

    For values Timeshare built itself on the request path, where each field already has its
    declared type: ``values`` must give every field, in the model's order (what the validated
    constructor would store, defaults included). It stores what pydantic's ``model_construct``
    stores, without that method's Python loop over the fields: in one ``timeit`` run, an answer
    with its timings cost 2.3 µs this way, 4.8 validated, and the answer alone 5.4 through
    ``model_construct`` (docs/PERFORMANCE.md, ninth session). Each caller has a test holding
    its result equal to the validated one.
    """
    m = cls.__new__(cls)
    _SET(m, "__dict__", values)
    _SET(m, "__pydantic_fields_set__", set(values))
    _SET(m, "__pydantic_extra__", None)
    _SET(m, "__pydantic_private__", None)
    return m


ANONYMOUS = "anonymous"  # the caller of a request that presents no caller key
# The most requests one ``Ingress.infer_many`` call may carry (``router.client`` coalesces up to
# its ``max_batch`` of them): bounds what one handle call can ask of a replica at once.
MAX_REQUESTS_PER_CALL = 256
# A request's ``trace_context``: the W3C Trace Context fields, each at most this long (a
# tracestate of up to 512 characters must be kept whole).
TRACE_CONTEXT_KEYS = ("traceparent", "tracestate")
TRACE_VALUE_MAX_CHARS = 512


def to_numpy(name: str, value: Any) -> np.ndarray:
    """Convert one input value to a numpy array or raise ``ValueError`` naming the input."""
    if isinstance(value, np.ndarray):
        arr = value
    elif hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor without importing torch
        arr = value.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as e:
            raise ValueError(f"inputs.{name}: not a rectangular numeric array ({e})") from None
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise ValueError(f"inputs.{name}: expected numeric data, got {arr.dtype} values")
    return arr


class CacheControl(BaseModel):
    """Per-request cache controls."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    skip_read: bool = Field(False, description="Do not answer from the cache.")
    skip_write: bool = Field(False, description="Do not store this answer in the cache.")


class InferenceRequest(BaseModel):
    """One inference call. ``model`` names a model or a route."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str = Field(..., min_length=1, description="Model or route name.")
    version: str | None = Field(None, description="Model version; default version when omitted.")
    inputs: dict[str, Any] = Field(...,
                                   description="Input tensors by name (numpy, torch or lists).")
    text: str | None = Field(
        None, description="Optional raw text, used only by the semantic cache and rule fallbacks."
    )
    priority: Priority = Field(Priority.INTERACTIVE, description="Priority class.")
    deadline_ms: float | None = Field(
        None, gt=0, description="Time budget from arrival; model config default when omitted."
    )
    caller: str = Field(ANONYMOUS, min_length=1, max_length=128, description=(
        "Caller identity. When the app has caller keys, it is the identity of caller_key and a "
        "different value is refused (403); without caller keys it is self-declared and labelled "
        "unverified."))
    caller_key: str | None = Field(None, repr=False, description=(
        "Caller key (app setting caller_keys); the ingress replaces it by the identity."))
    caller_verified: bool = Field(False, description=(
        "Set by the ingress only: true when caller was proven by a caller key."))
    cache: CacheControl = Field(default_factory=CacheControl, description="Cache controls.")
    request_id: str = Field(default_factory=new_request_id, description="Request id.")
    trace_context: dict[str, str] | None = Field(None, description=(
        "The caller's W3C trace context (traceparent, and tracestate): a traced request "
        "continues the caller's trace and follows its sampling. router.client.TimeshareClient "
        "fills it from the caller's current span, and a gRPC call's metadata fills it; over "
        "HTTP the headers are read as they come instead."))
    # Set by Timeshare where the request first arrives (the HTTP edge, the handle method); the
    # deadline runs from here, so queues in front of the pipeline count against it.
    arrival_s: SkipJsonSchema[float | None] = Field(
        None, exclude=True, description="time.monotonic() at arrival (set by Timeshare).")
    # Set by the HTTP edge when overload shed this request: it gets only a cache hit or its
    # local fallback steps, labelled with this reason (a caller setting it only sheds itself).
    shed_reason: SkipJsonSchema[str | None] = Field(
        None, exclude=True, description="Why the edge shed it (set by Timeshare).")

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, v: Any) -> Priority:
        return parse_priority(v)

    @field_validator("trace_context", mode="after")
    @classmethod
    def _trace_context(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return None
        unknown = sorted(set(v) - set(TRACE_CONTEXT_KEYS))
        if unknown:
            raise ValueError(f"trace_context: unknown keys {unknown}; "
                             f"expected {TRACE_CONTEXT_KEYS}")
        long = sorted(k for k, s in v.items() if len(s) > TRACE_VALUE_MAX_CHARS)
        if long:
            raise ValueError(f"trace_context: {long} over {TRACE_VALUE_MAX_CHARS} characters")
        return v

    @field_validator("inputs", mode="after")
    @classmethod
    def _inputs(cls, v: dict[str, Any]) -> dict[str, np.ndarray]:
        if not v:
            raise ValueError("inputs: at least one input tensor is required")
        return {name: to_numpy(name, value) for name, value in v.items()}


class Timings(BaseModel):
    """Where the time went, in milliseconds."""

    model_config = ConfigDict(extra="forbid")

    queue_ms: float = 0.0
    compute_ms: float = 0.0
    swap_ms: float = 0.0
    total_ms: float = 0.0


class RouteInfo(BaseModel):
    """Why the answer came from where it did (routes only)."""

    model_config = ConfigDict(extra="forbid")

    route: str
    strategy: str
    decision: str = Field(..., description="e.g. 'cheap', 'escalated', 'expensive', 'spilled'.")
    models_run: list[str] = Field(default_factory=list)
    confidence: float | None = None
    spilled: bool = False


class InferenceResponse(BaseModel):
    """One answer. ``degraded`` answers always say ``served_by`` and ``reason``."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    request_id: str
    model: str
    version: str | None = None
    outputs: dict[str, Any] = Field(default_factory=dict, description="Output tensors (numpy).")
    served_by: str = Field(..., description="'<pool>:<model>@<version>', 'rules', 'default', ...")
    degraded: bool = False
    reason: str | None = None
    cache: Literal["miss", "memory", "redis", "semantic", "bypass", "off"] = "off"
    similarity: float | None = None
    timings: Timings = Field(default_factory=Timings)
    pool: str | None = Field(
        None, description="The pool whose model computed this answer ('gpu' or 'cpu'); None "
        "when none did for this request (a cache hit, rules, a default).")
    route: RouteInfo | None = None
    final: bool = Field(True, description="False for the early answer of fast-then-refine.")
    caller: str = Field(ANONYMOUS, description="Who was billed: the request's caller.")
    caller_verified: bool = Field(False, description="True when a caller key proved the caller.")
    quota: Literal["local"] | None = Field(
        None, description="'local' when the caller's rate limit was decided by one ingress "
        "replica alone because the cluster quota store (Redis) was unavailable.")
