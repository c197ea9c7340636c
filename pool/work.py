"""The one typed object each way between the router and a pool replica.

:class:`PoolWork` is built once per model call by the router, after the model was resolved and
the inputs validated, and travels unchanged to the replica (through a Ray handle, or in-process);
the replica answers with one :class:`PoolReply` carrying outputs, timings and where it ran. The
pools' request router never reads the call's arguments: the caller puts the work's model, version
and class in the call's Ray ``RequestMetadata`` (``multiplexed_model_id``, see :func:`routing_id`)
and the router reads them back with :func:`route_target_of`.

A request the pool does not run for an expected reason (its deadline cannot be met, the device is
out of memory, the model is not loaded here, the queue is full) crosses as a :class:`PoolRefusal`
value, not as an exception: Ray Serve would log every raised exception with its formatted
traceback and pickle it back, which under overload costs the replica time exactly when it has
none (and expiries are the overload path). :func:`unwrap` on the caller's side turns a refusal
back into the same exception type, so callers handle one set of errors either way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from common.fallback_types import DeadlineTooShort, RequestExpired
from policies.priority import PRIORITIES, Priority
from policies.replica_ranking import RouteTarget
from pool.config import ModelConfig
from pool.errors import DeviceOutOfMemory, ModelNotLoaded

__all__ = ["PoolRefusal", "PoolReply", "PoolWork", "route_target_of", "routing_id", "unwrap"]

# Refusal kind <-> exception type. Anything else a pool raises is a real failure and is raised.
# (A subclass before its base: ``PoolRefusal.of`` takes the first kind that matches.)
_REFUSALS: dict[str, type[Exception]] = {
    "too_short": DeadlineTooShort,
    "expired": RequestExpired,
    "out_of_memory": DeviceOutOfMemory,
    "not_loaded": ModelNotLoaded,
    "queue_full": asyncio.QueueFull,
}


# Not frozen: built twice per request (the work, then its hop), 4x cheaper (docs/PERFORMANCE.md);
# nobody changes one once built (a hop is a new one), and its inputs dict made it unhashable anyway.
@dataclass(slots=True)
class PoolWork:
    """One model call: the resolved model, validated inputs, class, deadline and caller.

    ``deadline_at`` and ``arrived_at`` are wall-clock (``time.time()``) seconds so they mean the
    same on every host of a cluster; a replica turns the deadline into its own clock with
    :meth:`remaining_s`. ``deadline_at`` is this hop's deadline (the chain runner keeps time back
    for fallbacks), not the request's. ``config`` is the router's resolved config; it is not
    sent over the wire (the replica holds the same config for the version it loaded), which
    keeps the per-request pickle small.
    """

    model: str
    version: str | None  # None (callers outside the router only): the replica's default
    inputs: Mapping[str, np.ndarray]
    priority: Priority
    deadline_at: float
    arrived_at: float
    caller: str = "anonymous"
    request_id: str = ""
    config: ModelConfig | None = None

    @property
    def routing_id(self) -> str:
        """Its :func:`routing_id`: what the caller sets as the call's ``multiplexed_model_id``."""
        return routing_id(self.model, self.version, self.priority)

    def remaining_s(self, now: float | None = None) -> float:
        """Seconds left before ``deadline_at`` (``now``: wall-clock seconds, default now)."""
        return self.deadline_at - (time.time() if now is None else now)

    def for_hop(self, deadline_at: float) -> PoolWork:
        """This work with one hop's deadline (``dataclasses.replace`` without its field walk)."""
        return PoolWork(self.model, self.version, self.inputs, self.priority, deadline_at,
                        self.arrived_at, self.caller, self.request_id, self.config)

    def __reduce__(self):
        # Positional rebuild without the config: the wire form is the data the replica needs.
        return (PoolWork, (self.model, self.version, self.inputs, self.priority,
                           self.deadline_at, self.arrived_at, self.caller, self.request_id))


def routing_id(model: str, version: str | None, priority: Priority) -> str:
    """The id a pool call carries in Ray's ``RequestMetadata.multiplexed_model_id``:
    ``"<class>:<model>[@<version>]"``, e.g. ``"realtime:digits-small@1"``.

    Ray Serve's typed slot for "which model this call needs"; the class rides with the model
    because the pools' request router ranks replicas by the wait of the request's class, and
    Ray's FIFO matching (a replica picked for one request may serve an older one with the same
    id) then hands a replica to a request of the same model and class. Model names hold no
    ``@`` (``name@version`` is the pool's model key everywhere), so the id reads back whole.

    >>> routing_id("digits-small", "1", Priority.REALTIME)
    'realtime:digits-small@1'
    """
    return f"{priority.label}:{model}" if version is None else f"{priority.label}:{model}@{version}"


_CLASS_OF_LABEL = {p.label: p for p in PRIORITIES}


def route_target_of(rid: str) -> RouteTarget:
    """The model, version and class of a :func:`routing_id`; ``RouteTarget(None)`` for an empty
    id (a call that names no model: ``status``, ``index``...) or one not made by it.

    >>> route_target_of("batch:iris@2")
    RouteTarget(model='iris', version='2', priority=<Priority.BATCH: 2>)
    """
    label, sep, key = rid.partition(":")
    priority = _CLASS_OF_LABEL.get(label)
    if not sep or priority is None or not key:
        return RouteTarget(None)
    model, at, version = key.partition("@")
    if not model or (at and not version):
        return RouteTarget(None)
    return RouteTarget(model, version or None, priority)


@dataclass(slots=True)  # not frozen: one per request, as PoolWork; read, never changed
class PoolReply:
    """A pool's answer: this request's outputs, the version that ran, and where time went.

    ``received_at`` is the wall-clock second (``time.time()``, the replica's clock) at which the
    replica took the work; its queue wait, swap-in and compute follow it in that order. With it
    the router can place the pool's stages on a timeline (``router.tracing``) from the reply
    alone; 0.0 when unknown."""

    model: str
    version: str
    outputs: dict[str, np.ndarray]
    queue_ms: float
    compute_ms: float
    swap_ms: float
    device: str
    batch_size: int = 1
    received_at: float = 0.0


@dataclass(frozen=True, slots=True)
class PoolRefusal:
    """The pool did not run the request: ``kind`` is one of ``too_short`` (its deadline is
    shorter than its own work), ``expired`` (it cannot meet its deadline behind the queue),
    ``out_of_memory``, ``not_loaded``, ``queue_full``; ``message`` says which model and why."""

    kind: str
    message: str

    def error(self) -> Exception:
        return _REFUSALS[self.kind](self.message)

    @classmethod
    def of(cls, error: BaseException) -> PoolRefusal | None:
        """The refusal for an expected pool error, None for anything else."""
        for kind, etype in _REFUSALS.items():
            if isinstance(error, etype):
                return cls(kind, str(error))
        return None


def unwrap(reply: PoolReply | PoolRefusal) -> PoolReply:
    """The reply, or the refusal raised as its exception type."""
    if isinstance(reply, PoolRefusal):
        raise reply.error()
    return reply
