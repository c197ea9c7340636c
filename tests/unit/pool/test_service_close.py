"""PoolService.close: the repository poller has ended before the worker closes, even when a
library under a sync in flight swallows the cancel (turns it into its own error)."""

from __future__ import annotations

import asyncio

import pytest

from pool.service import PoolService

pytestmark = pytest.mark.asyncio


class _SwallowingSync(PoolService):
    """The real service; after its first sync, a sync blocks and turns a cancel into an error."""

    started = False
    entered: asyncio.Event
    ended = False

    async def sync(self) -> None:
        if not self.started:
            self.started = True
            await super().sync()
            return
        self.entered.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise RuntimeError("the library's own error") from None
        finally:
            self.ended = True


async def test_close_waits_for_the_poller_even_when_its_cancel_is_swallowed(
        demo_repo_master, tmp_path) -> None:
    svc = _SwallowingSync("cpu", str(demo_repo_master), str(tmp_path / "state"),
                          {"kind": "cpu", "memory_budget_bytes": 64 << 20, "pin_cores": "off"},
                          poll_interval_s=0.01)
    svc.entered = asyncio.Event()
    await svc.start()
    await asyncio.wait_for(svc.entered.wait(), 10)
    await asyncio.wait_for(svc.close(), 5)
    assert svc.ended and svc._poller is not None and svc._poller.done()
    assert not svc._poller.cancelled()  # it ended by its own loop's check, not by the cancel
