"""cancel_and_wait: background loops stop even when a cancel is swallowed under them."""

from __future__ import annotations

import asyncio
import logging

import pytest

from common.tasks import cancel_and_wait


class _SwallowingStore:
    """A client that turns a cancel under its await into its own error (as redis-py can)."""

    async def save(self) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise OSError("connection reset while cancelling") from None


async def _loop(store: _SwallowingStore, swallow: list[int], steps: list[str]) -> None:
    """A background loop that logs and carries on after any error (as every loop here does);
    its first ``swallow[0]`` cancels land in the store's save."""
    while True:
        try:
            if len(steps) < swallow[0]:
                await store.save()
            else:
                await asyncio.sleep(3600)
        except Exception as e:  # noqa: BLE001 - the loop under test outlives its errors
            steps.append(type(e).__name__)


async def test_a_plain_loop_stops_on_the_first_cancel() -> None:
    steps: list[str] = []
    task = asyncio.get_running_loop().create_task(_loop(_SwallowingStore(), [0], steps))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait([task, None]), 1.0)
    assert task.cancelled() and steps == []


async def test_a_swallowed_cancel_is_repeated_until_the_loop_ends() -> None:
    steps: list[str] = []
    task = asyncio.get_running_loop().create_task(_loop(_SwallowingStore(), [2], steps))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait([task], recancel_s=0.01), 2.0)
    assert steps == ["OSError", "OSError"], steps  # two cancels swallowed, the third ended it
    assert task.cancelled()


async def test_a_task_that_never_ends_is_left_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    steps: list[str] = []
    swallow = [10**9]
    task = asyncio.get_running_loop().create_task(_loop(_SwallowingStore(), swallow, steps),
                                                  name="stubborn")
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="common.tasks"):
        await asyncio.wait_for(cancel_and_wait([task], recancel_s=0.01, give_up_s=0.1), 2.0)
    assert not task.done() and len(steps) >= 5
    assert "stubborn" in caplog.text
    swallow[0] = 0  # the store stops swallowing: the test leaves nothing behind
    await asyncio.wait_for(cancel_and_wait([task], recancel_s=0.01), 1.0)
    assert task.cancelled()


async def test_a_failed_task_does_not_raise_from_stop() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    task = asyncio.get_running_loop().create_task(broken())
    await asyncio.sleep(0)
    await cancel_and_wait([task])
    assert isinstance(task.exception(), RuntimeError)
