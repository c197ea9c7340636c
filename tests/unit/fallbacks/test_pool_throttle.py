"""fallbacks.pool_throttle: per-(model, pool) adaptive throttling around a pool call."""

from __future__ import annotations

import asyncio

import pytest

from fallbacks.pool_throttle import PoolThrottled, PoolThrottles
from pool.work import PoolRefusal, PoolReply, unwrap
from router.errors import InvalidRequest, ServiceUnavailable
from tests.support.clocks import FakeClock


async def _ok() -> str:
    return "ok"


async def _refused() -> PoolReply:
    # What the pipeline's pool call does with the pool's refusal value (router.pool_client):
    # raises it as its exception type, here the queue-full one.
    return unwrap(PoolRefusal("queue_full", "pool: queue full for m@1"))


async def _overloaded() -> str:
    raise ServiceUnavailable("pool: queue full")


async def _bad_input() -> str:
    raise InvalidRequest("inputs.x: wrong shape", field="inputs.x")


def _throttles(clock, draw=0.0, **kw) -> PoolThrottles:
    # Built as the pipeline builds it (router.pipeline): no ``refused`` predicate, refusals
    # arrive as exceptions.
    return PoolThrottles(k=2.0, window_s=10.0, clock=clock, rng=lambda: draw, **kw)


async def test_healthy_pool_is_never_throttled() -> None:
    th = _throttles(FakeClock())
    for _ in range(200):
        assert await th.call("m", "cpu", _ok) == "ok"
    assert th.reject_probabilities() == {}


async def test_a_failing_model_is_throttled_and_its_neighbours_are_not() -> None:
    clock = FakeClock()
    th = _throttles(clock)
    for _ in range(10):
        assert await th.call("good", "cpu", _ok) == "ok"
    rejected = 0
    for _ in range(100):
        try:
            await th.call("broken", "cpu", _overloaded)
        except PoolThrottled as e:
            rejected += 1
            assert e.status_code == 503 and "broken@cpu" in str(e)
        except ServiceUnavailable:
            pass
    assert rejected > 90  # rng draws 0.0: every call rejected once the probability is > 0
    assert th.throttle("broken", "cpu").reject_probability() > 0.9
    assert await th.call("good", "cpu", _ok) == "ok"
    assert set(th.reject_probabilities()) == {"broken@cpu"}


async def test_refusal_values_count_as_not_accepted_and_bad_input_as_accepted() -> None:
    th = _throttles(FakeClock(), draw=0.999)  # let calls through so the counts are all observed
    for _ in range(20):
        with pytest.raises(asyncio.QueueFull):
            await th.call("m", "cpu", _refused)
        with pytest.raises(InvalidRequest):
            await th.call("n", "cpu", _bad_input)
    assert th.throttle("m", "cpu").reject_probability() == pytest.approx(20 / 21)
    assert th.throttle("n", "cpu").reject_probability() == 0.0


async def test_the_window_forgets_and_the_throttle_recovers() -> None:
    clock = FakeClock()
    th = _throttles(clock, draw=0.999)
    for _ in range(30):
        with pytest.raises(asyncio.QueueFull):
            await th.call("m", "cpu", _refused)
    assert th.throttle("m", "cpu").reject_probability() > 0.9
    clock.advance(11.0)
    assert th.throttle("m", "cpu").reject_probability() == 0.0


def test_keys_are_bounded_and_arguments_checked() -> None:
    th = _throttles(FakeClock(), max_keys=2)
    a = th.throttle("a", "cpu")
    th.throttle("b", "cpu")
    th.throttle("a", "cpu")  # a is now the most recent
    th.throttle("c", "cpu")  # b is dropped
    assert th.throttle("a", "cpu") is a
    assert len(th._throttles) == 2 and ("b", "cpu") not in th._throttles
    with pytest.raises(ValueError, match="max_keys"):
        PoolThrottles(max_keys=0)
    with pytest.raises(ValueError, match="k must be"):
        PoolThrottles(k=0)
