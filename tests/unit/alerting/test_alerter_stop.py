"""The alerter's loop stops when cancelled, even when a wake-up lands in the same instant.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when its task is cancelled after
the awaited event fired, losing the cancellation: a loop around it then outlives ``stop()``,
which waits for it forever (seen once as a 900 s hang in the suite)."""

from __future__ import annotations

import asyncio

from alerting.alerter import Alerter
from alerting.config import load_config


async def test_loop_ends_when_cancel_and_wake_coincide() -> None:
    alerter = Alerter(load_config({
        "environment": "test", "route": {"receiver": "team"},
        "receivers": [{"name": "team", "channels": [
            {"type": "webhook", "url": "http://127.0.0.1:9/never-called"}]}]}))
    for _ in range(20):  # each round: the loop is parked in its wait, then woken and cancelled
        task = asyncio.get_running_loop().create_task(alerter.run())
        await asyncio.sleep(0.01)
        alerter._wake.set()  # an alert arrived ...
        task.cancel()  # ... just as the owner stops
        done, _ = await asyncio.wait([task], timeout=2.0)
        assert task in done and task.cancelled()
    await alerter.stop(drain_timeout=0.1)
