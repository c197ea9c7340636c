"""The alerter's loop stops when cancelled, even when a wake-up lands in the same instant.

On Python 3.11 ``asyncio.wait_for`` returns the inner result when its task is cancelled after
the awaited event fired, losing the cancellation: a loop around it then outlives ``stop()``,
which waits for it forever (seen once as a 900 s hang in the suite)."""

from __future__ import annotations

import asyncio
import time

from alerting._private.state import MemoryStore
from alerting.alerter import Alerter
from alerting.config import load_config
from alerting.events import Alert


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


class _SwallowingStore(MemoryStore):
    """A store whose client turns a cancel into its own error, as some clients do under a
    cancel that lands mid-command: the cancellation never reaches the alerter's loop."""

    kind = "redis"  # so the alerter saves through it

    def __init__(self) -> None:
        self.entered = asyncio.Event()

    async def save(self, entries, acks) -> None:
        if self.entered.is_set():
            return  # only the loop's save hangs; stop()'s own final save goes through
        self.entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise OSError("connection reset") from None


async def test_stop_ends_the_loop_even_when_a_cancel_is_swallowed() -> None:
    alerter = Alerter(load_config({
        "environment": "test", "route": {"receiver": "team", "group_wait": "0s"},
        "receivers": [{"name": "team", "channels": [{"type": "log"}]}]}))
    store = _SwallowingStore()
    alerter._store = store
    await alerter.start()
    # a group to flush, so the loop's step saves (and hangs in the save)
    alerter.submit(Alert.create("ModelDown", "P3", "test", starts_at=time.time()))
    await asyncio.wait_for(store.entered.wait(), 5)
    await asyncio.wait_for(alerter.stop(drain_timeout=0.1), 5)  # was: waited forever
