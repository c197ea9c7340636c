"""The pools' request router, on the real app: it reads each call's model from the call's
metadata, and Ray keeps no request behind once it has been answered."""

from __future__ import annotations

import asyncio
import time

import numpy as np

from policies.priority import Priority
from pool._private.routers import live
from pool.request_router import published_stats
from pool.work import PoolReply, PoolWork
from router.pool_client import RemotePoolClient

MODEL = "iris-mlp1x16"
CALLS, AT_ONCE = 48, 8


def _work(priority: Priority) -> PoolWork:
    now = time.time()
    x = np.array([[5.1, 3.5, 1.4, 0.2]], np.float32)
    return PoolWork(MODEL, None, {"features": x}, priority, deadline_at=now + 30.0,
                    arrived_at=now)


def _pool_routers() -> list:
    return [r for r in live() if getattr(r, "_deployment_id", None) is not None
            and (r._deployment_id.app_name, r._deployment_id.name) == ("timeshare", "CPUPool")]


async def test_the_router_reads_the_model_from_the_metadata_and_keeps_nothing(app):
    from ray import serve

    # This process's handle routes through its own TimeshareRequestRouter (Ray builds one per
    # handle's router, here in the test process), so its state can be read after the calls.
    client = RemotePoolClient(serve.get_deployment_handle("CPUPool", app_name="timeshare"),
                              published_stats)
    classes = [Priority.REALTIME, Priority.INTERACTIVE]
    for start in range(0, CALLS, AT_ONCE):
        replies = await asyncio.gather(*(client.run(_work(classes[i % 2]))
                                         for i in range(start, start + AT_ONCE)))
        assert all(isinstance(r, PoolReply) and r.model == MODEL for r in replies)

    routers = _pool_routers()
    assert routers, "no TimeshareRequestRouter for CPUPool in this process"
    # The router counts a request toward its model's arrival rate only when it knows the model,
    # and it learns the model only from the metadata (it never reads the call's arguments).
    assert max(r.rates.rate(MODEL) for r in routers) > 0
    # Ray 2.60 indexes each pending request by its multiplexed_model_id and prunes that index
    # only through FIFOMixin + MultiplexMixin: without them every request stays there for good
    # (CALLS entries here). With them, at most the last wave of each id remains.
    kept = sum(len(q) for r in routers
               for q in getattr(r, "_pending_requests_by_model_id", {}).values())
    assert kept <= AT_ONCE, kept
