"""Single flight driven by its callers (``router.cache._private.single_flight.Flights``): the
first caller of a key runs the work and settles it; the others wait for its result."""

import asyncio

import pytest

from router.cache._private.single_flight import Flights


async def _call(flights: Flights, key: str, work, counter: list[int]):
    leads, shared = await flights.join(key)
    if not leads:
        return shared, True
    counter.append(1)
    try:
        result = await work()
    except BaseException as e:
        flights.fail(key, e)
        raise
    flights.settle(key, result)
    return result, False


async def test_concurrent_calls_share_one_execution():
    flights: Flights[str] = Flights()
    calls: list[int] = []
    gate = asyncio.Event()

    async def work():
        await gate.wait()
        return "answer"

    tasks = [asyncio.create_task(_call(flights, "k", work, calls)) for _ in range(10)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert len(calls) == 1
    assert [r for r, _ in results] == ["answer"] * 10
    assert sum(shared for _, shared in results) == 9
    assert len(flights) == 0


async def test_errors_are_shared_then_cleared():
    flights: Flights[int] = Flights()
    calls: list[int] = []
    gate = asyncio.Event()

    async def failing():
        await gate.wait()
        raise ValueError("boom")

    tasks = [asyncio.create_task(_call(flights, "k", failing, calls)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert len(calls) == 1 and all(isinstance(r, ValueError) for r in results)
    assert len(flights) == 0

    async def ok():
        return 1

    assert await _call(flights, "k", ok, calls) == (1, False)


async def test_a_cancelled_leader_lets_a_waiting_caller_compute():
    flights: Flights[int] = Flights()
    calls: list[int] = []
    gate = asyncio.Event()

    async def work():
        await gate.wait()
        return 7

    first = asyncio.create_task(_call(flights, "k", work, calls))
    await asyncio.sleep(0)
    second = asyncio.create_task(_call(flights, "k", work, calls))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    gate.set()
    assert await second == (7, False)  # it led the flight the first one abandoned
    assert len(calls) == 2
    with pytest.raises(asyncio.CancelledError):
        await first
    assert len(flights) == 0


async def test_settling_twice_is_a_no_op():
    flights: Flights[int] = Flights()
    assert (await flights.join("k")) == (True, None)
    flights.settle("k", 1)
    flights.settle("k", 2)
    flights.fail("k", RuntimeError("late"))
    assert len(flights) == 0
