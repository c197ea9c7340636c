"""The client's call sharing (router._private.coalesce), with a scripted transport: who goes
alone, who waits, what a shared call carries, and whose error reaches whom."""

from __future__ import annotations

import asyncio

import pytest

from router._private.coalesce import Coalescer


class Transport:
    """Answers each request ``r`` with ``r * 10`` once released; a negative request is that
    request's own error; ``fail`` makes the next shared call fail as a whole."""

    def __init__(self) -> None:
        self.sent: list[list[int]] = []
        self.gates: list[asyncio.Event] = []
        self.fail: Exception | None = None

    async def _wait(self, requests: list[int]) -> None:
        self.sent.append(requests)
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()

    async def one(self, r: int) -> int:
        await self._wait([r])
        if r < 0:
            raise ValueError(f"bad {r}")
        return r * 10

    async def many(self, rs: list[int]) -> list[int | BaseException]:
        await self._wait(list(rs))
        if self.fail is not None:
            raise self.fail
        return [ValueError(f"bad {r}") if r < 0 else r * 10 for r in rs]

    async def release_all(self) -> None:
        """Release every call, and the calls their returns launch, until none is left."""
        for _ in range(20):
            for g in self.gates:
                g.set()
            await asyncio.sleep(0)


def drive(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 10))  # a lost wake-up fails here, never hangs


def test_a_lone_caller_goes_at_once_and_alone():
    async def run() -> None:
        t = Transport()
        c = Coalescer(t.one, t.many, max_in_flight=2, max_batch=8)
        task = asyncio.create_task(c.call(3))
        await asyncio.sleep(0)
        assert t.sent == [[3]] and c.in_flight == 1
        await t.release_all()
        assert await task == 30 and c.in_flight == 0
        assert (c.calls, c.requests) == (1, 1)

    drive(run())


def test_waiting_requests_leave_together_when_a_call_returns():
    async def run() -> None:
        t = Transport()
        c = Coalescer(t.one, t.many, max_in_flight=2, max_batch=8)
        tasks = [asyncio.create_task(c.call(r)) for r in range(1, 7)]
        await asyncio.sleep(0)
        assert t.sent == [[1], [2]]  # two out, the other four wait: no call for them yet
        t.gates[0].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert t.sent[2] == [3, 4, 5, 6] and c.in_flight == 2
        await t.release_all()
        assert [await x for x in tasks] == [10, 20, 30, 40, 50, 60]
        assert (c.calls, c.requests, c.in_flight) == (3, 6, 0)

    drive(run())


def test_each_request_gets_its_own_error_and_a_failed_call_reaches_all_its_callers():
    async def run() -> None:
        t = Transport()
        c = Coalescer(t.one, t.many, max_in_flight=1, max_batch=8)
        first = asyncio.create_task(c.call(1))
        await asyncio.sleep(0)
        mixed = [asyncio.create_task(c.call(r)) for r in (2, -3, 4)]
        await asyncio.sleep(0)
        await t.release_all()
        out = await asyncio.gather(first, *mixed, return_exceptions=True)
        assert out[:2] == [10, 20] and out[3] == 40
        assert isinstance(out[2], ValueError) and "bad -3" in str(out[2])

        blocker = asyncio.create_task(c.call(5))
        await asyncio.sleep(0)
        doomed = [asyncio.create_task(c.call(r)) for r in (6, 7)]
        await asyncio.sleep(0)
        t.fail = ConnectionError("replica gone")
        await t.release_all()
        assert await blocker == 50
        for d in doomed:
            with pytest.raises(ConnectionError):
                await d
        assert c.in_flight == 0

    drive(run())


def test_a_batch_over_the_cap_takes_the_most_urgent_first_and_skips_cancelled_callers():
    async def run() -> None:
        t = Transport()
        c = Coalescer(t.one, t.many, max_in_flight=1, max_batch=2, urgency=lambda r: -r)
        first = asyncio.create_task(c.call(1))
        await asyncio.sleep(0)
        waiting = {r: asyncio.create_task(c.call(r)) for r in (2, 3, 4, 5)}
        await asyncio.sleep(0)
        waiting[5].cancel()
        await asyncio.sleep(0)
        t.gates[0].set()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert t.sent[1] == [4, 3]  # 5 left; of the rest the two most urgent, 2 waits on
        await t.release_all()
        assert t.sent[2] == [2]
        assert await first == 10 and [await waiting[r] for r in (2, 3, 4)] == [20, 30, 40]
        assert c.in_flight == 0

    drive(run())


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="max_in_flight"):
        Coalescer(Transport().one, Transport().many, max_in_flight=0, max_batch=4)
