import asyncio

import pytest

from router.cache._private.single_flight import SingleFlight


async def test_concurrent_calls_share_one_execution():
    sf = SingleFlight()
    calls = 0
    gate = asyncio.Event()

    async def work():
        nonlocal calls
        calls += 1
        await gate.wait()
        return "answer"

    tasks = [asyncio.create_task(sf.run("k", work)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1
    assert [r for r, _ in results] == ["answer"] * 10
    assert sum(shared for _, shared in results) == 9
    assert len(sf) == 0


async def test_errors_are_shared_then_cleared():
    sf = SingleFlight()
    calls = 0
    gate = asyncio.Event()

    async def failing():
        nonlocal calls
        calls += 1
        await gate.wait()
        raise ValueError("boom")

    tasks = [asyncio.create_task(sf.run("k", failing)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert calls == 1 and all(isinstance(r, ValueError) for r in results)
    assert len(sf) == 0

    async def ok():
        return 1

    assert await sf.run("k", ok) == (1, False)


async def test_a_cancelled_caller_does_not_cancel_the_others():
    sf = SingleFlight()
    gate = asyncio.Event()

    async def work():
        await gate.wait()
        return 7

    first = asyncio.create_task(sf.run("k", work))
    second = asyncio.create_task(sf.run("k", work))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert await second == (7, True)
    with pytest.raises(asyncio.CancelledError):
        await first
