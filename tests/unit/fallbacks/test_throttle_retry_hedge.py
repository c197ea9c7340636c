import asyncio

import pytest

from fallbacks.deadline import Deadline
from fallbacks.hedge import hedged
from fallbacks.retry import RetryBudget, is_idempotent_failure, retry_call
from fallbacks.throttle import AdaptiveThrottle
from router.errors import DeadlineExceeded, InvalidRequest, ServiceUnavailable


class RayActorError(Exception):
    """Stands in for ray.exceptions.RayActorError (matched by name, no Ray import)."""


class ActorDiedError(RayActorError):
    pass


# -- adaptive throttling ----------------------------------------------------------------------


def test_throttle_never_rejects_a_healthy_backend(clock):
    th = AdaptiveThrottle(k=2.0, clock=clock, rng=lambda: 0.0)  # a 0.0 roll rejects if p > 0
    for _ in range(100):
        assert th.allow()
        th.on_accepted()
    assert th.reject_probability() == 0.0


def test_throttle_rejects_in_proportion_to_failures_and_forgets(clock):
    rolls = iter([0.5] * 1000)
    th = AdaptiveThrottle(k=2.0, window_s=10, clock=clock, rng=lambda: next(rolls))
    allowed = sum(th.allow() for _ in range(100))  # backend accepts nothing
    # p climbs towards 100/101; once it reaches 0.5 the 0.5 rolls are rejected
    assert allowed == 2  # p=0 (no roll), p=1/2 → roll 0.5 >= 0.5 allowed, then p=2/3 ...
    assert th.reject_probability() == pytest.approx(100 / 101)
    clock.advance(10)  # the window slides past every failure
    assert th.reject_probability() == 0.0


def test_throttle_uses_its_window_per_second(clock):
    th = AdaptiveThrottle(k=1.0, window_s=2, clock=clock, rng=lambda: 0.99)
    th.allow()
    clock.advance(1)
    th.allow()
    th.on_accepted()
    assert th.reject_probability() == pytest.approx((2 - 1) / 3)
    clock.advance(1)  # the first second leaves the window
    assert th.reject_probability() == 0.0


# -- retry predicate and budget ---------------------------------------------------------------


@pytest.mark.parametrize(
    "exc, retry",
    [
        (ConnectionResetError(), True),
        (ServiceUnavailable("replica gone"), True),
        (ActorDiedError(), True),
        (asyncio.TimeoutError(), False),
        (DeadlineExceeded("late"), False),
        (InvalidRequest("bad", field="inputs.x"), False),
        (RuntimeError("CUDA error"), False),
        (asyncio.CancelledError(), False),
    ],
)
def test_idempotent_failure_predicate(exc, retry):
    assert is_idempotent_failure(exc) is retry


def test_retryable_attribute_overrides():
    e = RuntimeError("x")
    e.retryable = True
    assert is_idempotent_failure(e)


def test_retry_budget_is_a_ratio_of_requests():
    b = RetryBudget(ratio=0.1, max_tokens=2, initial_tokens=0)
    assert not b.try_withdraw()
    for _ in range(10):
        b.on_request()
    assert b.try_withdraw() and not b.try_withdraw()
    for _ in range(1000):
        b.on_request()
    assert b.tokens == 2  # bounded burst
    with pytest.raises(ValueError, match="ratio"):
        RetryBudget(ratio=0)


class Flaky:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


async def no_sleep(_: float) -> None:
    return None


async def test_retry_call_retries_idempotent_failures():
    f = Flaky([ConnectionResetError(), ServiceUnavailable("x")])
    out = await retry_call(
        f, deadline=Deadline.after_ms(1000), budget=RetryBudget(), sleep=no_sleep
    )
    assert (out, f.calls) == ("ok", 3)


async def test_retry_call_does_not_retry_other_failures():
    f = Flaky([RuntimeError("model bug")])
    with pytest.raises(RuntimeError):
        await retry_call(f, deadline=Deadline.after_ms(1000), budget=RetryBudget(), sleep=no_sleep)
    assert f.calls == 1


async def test_retry_call_is_bounded_by_attempts_budget_and_deadline():
    f = Flaky([ConnectionError()] * 10)
    with pytest.raises(ConnectionError):
        await retry_call(
            f,
            deadline=Deadline.after_ms(1000),
            budget=RetryBudget(),
            max_attempts=3,
            sleep=no_sleep,
        )
    assert f.calls == 3
    f = Flaky([ConnectionError()] * 10)
    with pytest.raises(ConnectionError):
        await retry_call(
            f,
            deadline=Deadline.after_ms(1000),
            budget=RetryBudget(initial_tokens=0),
            sleep=no_sleep,
        )
    assert f.calls == 1  # budget spent (0 + 0.1 tokens)
    f = Flaky([ConnectionError()] * 10)
    with pytest.raises(ConnectionError):
        await retry_call(
            f, deadline=Deadline.after_ms(1), budget=RetryBudget(), backoff_s=0.01, sleep=no_sleep
        )
    assert f.calls == 1  # the backoff would end past the deadline


# -- hedging ----------------------------------------------------------------------------------


class Attempts:
    """attempt(i) sleeps delays[i] then answers i (or raises if the delay is negative)."""

    def __init__(self, delays: list[float]) -> None:
        self.delays = delays
        self.started: list[int] = []
        self.cancelled: list[int] = []

    async def __call__(self, i: int) -> int:
        self.started.append(i)
        try:
            await asyncio.sleep(abs(self.delays[i]))
        except asyncio.CancelledError:
            self.cancelled.append(i)
            raise
        if self.delays[i] < 0:
            raise ConnectionError(f"attempt {i} failed")
        return i


async def test_fast_first_attempt_needs_no_hedge():
    a = Attempts([0.001, 0.001])
    assert await hedged(a, delay_s=5.0) == 0
    assert a.started == [0]


async def test_hedge_wins_and_the_slow_attempt_is_cancelled():
    a = Attempts([5.0, 0.001])
    assert await hedged(a, delay_s=0.005) == 1
    assert a.started == [0, 1] and a.cancelled == [0]


async def test_first_answer_wins_even_if_it_is_the_original():
    a = Attempts([0.02, 5.0])
    assert await hedged(a, delay_s=0.005) == 0
    assert a.cancelled == [1]


async def test_failed_attempt_starts_the_next_at_once_and_all_failures_raise():
    a = Attempts([-0.001, 0.001])
    assert await hedged(a, delay_s=10.0) == 1
    b = Attempts([-0.001, -0.001])
    with pytest.raises(ConnectionError, match="attempt 1"):
        await hedged(b, delay_s=10.0)


async def test_hedging_respects_the_retry_budget():
    a = Attempts([0.03, 0.001])
    out = await hedged(a, delay_s=0.005, budget=RetryBudget(initial_tokens=0))
    assert out == 0 and a.started == [0]


async def test_caller_cancellation_cancels_every_attempt():
    a = Attempts([5.0, 5.0])
    task = asyncio.create_task(hedged(a, delay_s=0.001))
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(a.cancelled) == [0, 1]
