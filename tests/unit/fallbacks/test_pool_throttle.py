"""fallbacks.pool_throttle: per-(model, pool) adaptive throttling around a pool call."""

from __future__ import annotations

import pytest

from fallbacks.pool_throttle import PoolThrottled, PoolThrottles
from router.errors import InvalidRequest, ServiceUnavailable


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Refusal:
    """Stands in for the pool's refusal value (``pool.wire.PoolRefusal``)."""


async def _ok() -> str:
    return "ok"


async def _refused() -> Refusal:
    return Refusal()


async def _overloaded() -> str:
    raise ServiceUnavailable("pool: queue full")


async def _bad_input() -> str:
    raise InvalidRequest("inputs.x: wrong shape", field="inputs.x")


def _throttles(clock, draw=0.0, **kw) -> PoolThrottles:
    return PoolThrottles(k=2.0, window_s=10.0, clock=clock, rng=lambda: draw,
                         refused=lambda r: isinstance(r, Refusal), **kw)


async def test_healthy_pool_is_never_throttled() -> None:
    th = _throttles(Clock())
    for _ in range(200):
        assert await th.call("m", "cpu", _ok) == "ok"
    assert th.reject_probabilities() == {}


async def test_a_failing_model_is_throttled_and_its_neighbours_are_not() -> None:
    clock = Clock()
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
    th = _throttles(Clock(), draw=0.999)  # let calls through so the counts are all observed
    for _ in range(20):
        await th.call("m", "cpu", _refused)
        with pytest.raises(InvalidRequest):
            await th.call("n", "cpu", _bad_input)
    assert th.throttle("m", "cpu").reject_probability() == pytest.approx(20 / 21)
    assert th.throttle("n", "cpu").reject_probability() == 0.0


async def test_the_window_forgets_and_the_throttle_recovers() -> None:
    clock = Clock()
    th = _throttles(clock, draw=0.999)
    for _ in range(30):
        await th.call("m", "cpu", _refused)
    assert th.throttle("m", "cpu").reject_probability() > 0.9
    clock.t += 11.0
    assert th.throttle("m", "cpu").reject_probability() == 0.0


def test_keys_are_bounded_and_arguments_checked() -> None:
    th = _throttles(Clock(), max_keys=2)
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
