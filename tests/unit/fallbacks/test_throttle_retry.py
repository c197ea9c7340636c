import asyncio

import pytest

from fallbacks.deadline import Deadline
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


def test_throttle_counts_calls_in_flight_only_once_they_end(clock):
    # a cold burst: many calls let through before any answer must not throttle a healthy pool
    th = AdaptiveThrottle(k=2.0, window_s=10, clock=clock, rng=lambda: 0.0)
    assert all(th.allow() for _ in range(50))
    for _ in range(50):
        th.on_accepted()
    assert th.reject_probability() == 0.0


def test_throttle_rejects_in_proportion_to_failures_and_forgets(clock):
    rolls = iter([0.5] * 1000)
    th = AdaptiveThrottle(k=2.0, window_s=10, clock=clock, rng=lambda: next(rolls))
    allowed = 0
    for _ in range(100):  # backend accepts nothing
        if th.allow():
            allowed += 1
            th.on_rejected()
    # p climbs towards 100/101; once it reaches 0.5 the 0.5 rolls are rejected
    assert allowed == 2  # p=0 (no roll), p=1/2 → roll 0.5 >= 0.5 allowed, then p=2/3 ...
    assert th.reject_probability() == pytest.approx(100 / 101)
    clock.advance(10)  # the window slides past every failure
    assert th.reject_probability() == 0.0


def test_throttle_uses_its_window_per_second(clock):
    th = AdaptiveThrottle(k=1.0, window_s=2, clock=clock, rng=lambda: 0.99)
    assert th.allow()
    th.on_rejected()
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
