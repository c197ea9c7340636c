"""What crosses the handle between the router and a pool replica.

A request the pool does not run for an expected reason (its deadline cannot be met, the device
is out of memory, the model is not loaded here, the queue is full) crosses as a
:class:`PoolRefusal` value, not as an exception: Ray Serve would log every raised exception with
its formatted traceback and pickle it back, which under overload costs the replica time exactly
when it has none (and expiries are the overload path). :func:`unwrap` on the caller's side turns
a refusal back into the same exception type, so callers handle one set of errors either way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.priority import Priority
from pool.errors import DeviceOutOfMemory, ModelNotLoaded, RequestExpired

__all__ = ["PoolRefusal", "PoolReply", "work_request", "run_work", "run_work_or_refusal",
           "unwrap"]

# Refusal kind <-> exception type. Anything else a pool raises is a real failure and is raised.
_REFUSALS: dict[str, type[Exception]] = {
    "expired": RequestExpired,
    "out_of_memory": DeviceOutOfMemory,
    "not_loaded": ModelNotLoaded,
    "queue_full": asyncio.QueueFull,
}


@dataclass(frozen=True, slots=True)
class PoolReply:
    pool: str
    model: str
    version: str
    outputs: dict[str, np.ndarray]
    queue_ms: float
    compute_ms: float
    swap_ms: float
    device: str


@dataclass(frozen=True, slots=True)
class PoolRefusal:
    """The pool did not run the request: ``kind`` is one of ``expired``, ``out_of_memory``,
    ``not_loaded``, ``queue_full``; ``message`` says which model and why."""

    kind: str
    message: str

    def error(self) -> Exception:
        return _REFUSALS[self.kind](self.message)

    @classmethod
    def of(cls, error: BaseException) -> "PoolRefusal | None":
        """The refusal for an expected pool error, None for anything else."""
        for kind, etype in _REFUSALS.items():
            if isinstance(error, etype):
                return cls(kind, str(error))
        return None


def unwrap(reply: "PoolReply | PoolRefusal") -> "PoolReply":
    """The reply, or the refusal raised as its exception type."""
    if isinstance(reply, PoolRefusal):
        raise reply.error()
    return reply


def work_request(model: str, version: str, inputs: dict[str, np.ndarray], priority: Priority,
                 timeout_s: float) -> dict[str, Any]:
    """The wire form of a dispatch: the first positional argument of the pool's ``infer``.

    The pools' request router reads ``model``, ``version`` and ``priority`` from it.
    """
    return {"model": model, "version": version, "inputs": inputs, "priority": int(priority),
            "timeout_s": timeout_s}


async def run_work(host, pool: str, work: dict[str, Any]) -> PoolReply:
    """Run a ``work_request`` on a ``pool.host.ModelHost``."""
    version, result = await host.infer(
        work["model"], work["version"], work["inputs"],
        priority=Priority(work["priority"]), timeout_s=work["timeout_s"],
    )
    return PoolReply(
        pool=pool, model=work["model"], version=version,
        outputs={k: v.numpy() for k, v in result.outputs.items()},
        queue_ms=result.queue_ms, compute_ms=result.compute_ms, swap_ms=result.swap_ms,
        device=result.device,
    )


async def run_work_or_refusal(host, pool: str, work: dict[str, Any]) -> PoolReply | PoolRefusal:
    """:func:`run_work` with expected refusals returned as values (for the Ray adapter)."""
    try:
        return await run_work(host, pool, work)
    except Exception as e:
        refusal = PoolRefusal.of(e)
        if refusal is None:
            raise
        return refusal
