"""SharedTimeouts keeps asyncio.timeout's semantics with one loop timer per millisecond."""

import asyncio
import time

import pytest

from fallbacks._private.shared_timeout import SharedTimeouts


async def test_expiry_raises_timeout_error_not_early_and_not_much_late():
    timeouts = SharedTimeouts()
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        entered = loop.time()
        async with timeouts.after(0.03) as scope:
            # never early: the shared timer is scheduled (on the loop's clock) no sooner than
            # the scope's own deadline, and an asyncio timer never fires before its time
            (slot,) = timeouts._slots
            assert slot * timeouts.resolution_s >= entered + 0.03
            await asyncio.sleep(1)
    took = time.monotonic() - t0
    assert scope.expired()
    assert took < 5.0  # and not held: only a hang breaks this bound
    assert asyncio.current_task().cancelling() == 0  # the cancel it used was taken back


async def test_answer_in_time_leaves_no_member_and_a_late_timer_does_nothing():
    timeouts = SharedTimeouts()
    async with timeouts.after(0.02) as scope:
        await asyncio.sleep(0)
    assert not scope.expired()
    await asyncio.sleep(0.05)  # its slot's timer fires with nobody left in it
    assert timeouts.pending_slots == 0
    assert not scope.expired()
    await asyncio.sleep(0)  # and the task was not cancelled by it


async def test_scopes_in_one_millisecond_share_one_timer_and_all_expire():
    timeouts = SharedTimeouts(resolution_s=0.05)
    expired = []

    async def call(i):
        try:
            async with timeouts.after(0.01):
                await asyncio.sleep(1)
        except TimeoutError:
            expired.append(i)

    tasks = [asyncio.create_task(call(i)) for i in range(20)]
    await asyncio.sleep(0)
    assert timeouts.pending_slots <= 2  # at most a slot boundary between the twenty entries
    await asyncio.gather(*tasks)
    assert sorted(expired) == list(range(20))


async def test_an_outside_cancellation_propagates_as_cancellation():
    timeouts = SharedTimeouts()
    entered = asyncio.Event()

    async def call():
        async with timeouts.after(10):
            entered.set()
            await asyncio.sleep(1)

    task = asyncio.create_task(call())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_cancelled_from_outside_as_it_expires_stays_a_cancellation():
    """asyncio.timeout's rule: another cancel request in the same step wins over the timeout."""
    timeouts = SharedTimeouts()
    scopes = []

    async def call():
        async with timeouts.after(10) as scope:
            scopes.append(scope)
            await asyncio.sleep(1)

    task = asyncio.create_task(call())
    while not scopes:
        await asyncio.sleep(0)
    scopes[0]._expire()  # its timer and an outside cancel in the same step
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert scopes[0].expired()


async def test_errors_inside_the_block_pass_through_unchanged():
    timeouts = SharedTimeouts()
    with pytest.raises(KeyError):
        async with timeouts.after(1):
            raise KeyError("x")


async def test_outside_a_task_and_entered_twice_are_errors():
    timeouts = SharedTimeouts()
    scope = timeouts.after(1)
    async with scope:
        pass
    with pytest.raises(RuntimeError, match="once"):
        async with scope:
            pass
    with pytest.raises(ValueError, match="resolution_s"):
        SharedTimeouts(resolution_s=0)


def test_a_new_loop_starts_afresh():
    timeouts = SharedTimeouts()

    async def expire():
        with pytest.raises(TimeoutError):
            async with timeouts.after(0.005):
                await asyncio.sleep(1)

    async def leave_a_slot():
        async with timeouts.after(5):
            pass

    asyncio.run(leave_a_slot())
    assert timeouts.pending_slots == 1  # that loop closed with its timer unfired
    asyncio.run(expire())  # the next loop's scopes are not mixed with the dead loop's
    assert timeouts.pending_slots == 0


async def test_a_scope_joins_the_first_slot_at_or_after_its_expiry():
    timeouts = SharedTimeouts(resolution_s=0.05)
    loop = asyncio.get_running_loop()
    for delay in (0.001, 0.01, 0.049, 0.26):
        before = loop.time()
        async with timeouts.after(delay):
            (slot,) = [s for s, members in timeouts._slots.items() if members]
            at = slot * timeouts.resolution_s
            assert before + delay <= at < loop.time() + delay + timeouts.resolution_s
