"""router._private.within: a coroutine's result, with a timer armed only if it has to wait."""

from __future__ import annotations

import asyncio

import pytest

from router._private.within import within


async def test_a_coroutine_that_never_waits_arms_no_timer(monkeypatch) -> None:
    armed = []
    monkeypatch.setattr(asyncio, "timeout", lambda s: armed.append(s))  # would break if used
    ready = asyncio.Event()
    ready.set()

    async def receive() -> str:
        await ready.wait()  # set already: returns without suspending
        return "body"

    assert await within(receive(), 5.0) == "body"
    assert armed == []


async def test_a_coroutine_that_waits_gets_its_value_and_the_values_it_was_sent() -> None:
    async def two_waits() -> int:
        await asyncio.sleep(0)  # a bare yield to the loop
        return await asyncio.sleep(0.01, result=7)  # a future

    assert await within(two_waits(), 1.0) == 7


async def test_a_coroutine_that_waits_too_long_times_out_and_runs_its_clean_up() -> None:
    cleaned = asyncio.Event()

    async def never() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.set()

    with pytest.raises(TimeoutError):
        await within(never(), 0.02)
    assert cleaned.is_set()


async def test_cancelling_the_caller_cancels_the_coroutine_where_it_waits() -> None:
    seen: list[str] = []

    async def waits() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.create_task(within(waits(), 60.0))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_errors_pass_through_from_either_step() -> None:
    async def fails_at_once() -> None:
        raise ValueError("first step")

    async def fails_later() -> None:
        await asyncio.sleep(0)
        raise KeyError("later")

    with pytest.raises(ValueError, match="first step"):
        await within(fails_at_once(), 1.0)
    with pytest.raises(KeyError, match="later"):
        await within(fails_later(), 1.0)


async def test_an_awaitable_that_is_not_a_coroutine_is_awaited_under_the_timeout() -> None:
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_later(0.01, done.set_result, "future")
    assert await within(done, 1.0) == "future"
    with pytest.raises(TimeoutError):
        await within(loop.create_future(), 0.01)
