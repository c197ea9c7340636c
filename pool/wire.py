"""What crosses the handle between the router and a pool replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from policies.priority import Priority

__all__ = ["PoolReply", "work_request", "run_work"]


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
