import pytest
from pydantic import ValidationError

from fallbacks.breaker import (
    BreakerConfig,
    BreakerRegistry,
    BreakerState,
    CircuitBreaker,
    StateTransition,
)

S = BreakerState


def make(clock, **kw) -> tuple[CircuitBreaker, list[StateTransition]]:
    events: list[StateTransition] = []
    cfg = BreakerConfig(**kw)
    b = CircuitBreaker(("m", "gpu"), cfg, clock=clock, listeners=(events.append,))
    return b, events


def calls(b, n, *, fail=False, duration=0.01):
    for _ in range(n):
        assert b.try_acquire()
        (b.on_error if fail else b.on_success)(duration)


def test_stays_closed_below_minimum_number_of_calls(clock):
    b, events = make(clock, sliding_window_size=10, minimum_number_of_calls=5)
    calls(b, 4, fail=True)
    assert b.state is S.CLOSED
    assert b.metrics().failure_rate == -1.0
    calls(b, 1, fail=True)
    assert b.state is S.OPEN
    assert [(e.from_state, e.to_state) for e in events] == [(S.CLOSED, S.OPEN)]
    assert events[0].key == ("m", "gpu")
    assert events[0].metrics.failure_rate == 100.0


def test_failure_rate_threshold_is_inclusive(clock):
    b, _ = make(clock, sliding_window_size=4, minimum_number_of_calls=4, failure_rate_threshold=50)
    calls(b, 3)
    calls(b, 1, fail=True)  # 25 %
    assert b.state is S.CLOSED
    calls(b, 1, fail=True)  # window [ok, ok, fail, fail] = 50 %
    assert b.state is S.OPEN


def test_count_window_rolls_over(clock):
    b, _ = make(clock, sliding_window_size=4, minimum_number_of_calls=4, failure_rate_threshold=75)
    calls(b, 2, fail=True)
    calls(b, 4)  # both failures fall out of the window
    assert b.metrics().failed_calls == 0
    calls(b, 2, fail=True)  # 50 % < 75 %
    assert b.state is S.CLOSED
    calls(b, 1, fail=True)  # 75 %
    assert b.state is S.OPEN


def test_count_window_caps_minimum_calls_at_window_size(clock):
    cfg = BreakerConfig(sliding_window_size=3, minimum_number_of_calls=100)
    assert cfg.minimum_number_of_calls == 3


def test_time_window_forgets_old_buckets(clock):
    b, _ = make(
        clock,
        sliding_window_type="time_based",
        sliding_window_size=10,
        minimum_number_of_calls=4,
    )
    calls(b, 3, fail=True)
    clock.advance(10.0)  # the three failures leave the 10 s window
    calls(b, 3)
    assert b.metrics().calls == 3
    calls(b, 1, fail=True)  # 1 of 4 failed
    assert b.state is S.CLOSED
    clock.advance(5.0)
    calls(b, 1, fail=True)  # 2 of 5 failed
    assert b.state is S.CLOSED
    calls(b, 1, fail=True)  # 3 of 6 failed = 50 %
    assert b.state is S.OPEN


def test_slow_calls_open_the_breaker(clock):
    b, events = make(
        clock,
        sliding_window_size=4,
        minimum_number_of_calls=4,
        slow_call_rate_threshold=50,
        slow_call_duration_threshold_s=0.2,
    )
    calls(b, 2, duration=0.05)
    calls(b, 1, duration=0.2)  # at the threshold counts as slow
    assert b.state is S.CLOSED
    calls(b, 1, duration=0.5)
    assert b.state is S.OPEN
    assert events[-1].metrics.slow_call_rate == 50.0
    assert events[-1].metrics.failure_rate == 0.0


def test_open_rejects_then_half_open_after_wait(clock):
    b, events = make(
        clock, sliding_window_size=2, minimum_number_of_calls=2, wait_duration_in_open_state_s=5
    )
    calls(b, 2, fail=True)
    assert not b.try_acquire()
    clock.advance(4.99)
    assert not b.try_acquire()
    assert b.metrics().not_permitted_calls == 2
    clock.advance(0.01)
    assert b.state is S.HALF_OPEN
    assert [e.to_state for e in events] == [S.OPEN, S.HALF_OPEN]
    assert events[-1].at == clock()


def half_open(clock, **kw) -> tuple[CircuitBreaker, list[StateTransition]]:
    """A breaker opened by one failure (window of 1) and moved to HALF_OPEN after its 1 s wait."""
    b, events = make(clock, sliding_window_size=1, wait_duration_in_open_state_s=1, **kw)
    calls(b, 1, fail=True)
    clock.advance(1)
    assert b.state is S.HALF_OPEN
    return b, events


def test_half_open_permits_limited_trials_then_closes(clock):
    b, events = half_open(clock, permitted_number_of_calls_in_half_open_state=3)
    assert [b.try_acquire() for _ in range(4)] == [True, True, True, False]
    b.on_success(0.01)
    b.on_error(0.01)
    assert b.state is S.HALF_OPEN  # needs all 3 trials before deciding
    b.on_success(0.01)  # 1 of 3 failed = 33 % < 50 %
    assert b.state is S.CLOSED
    assert [e.to_state for e in events] == [S.OPEN, S.HALF_OPEN, S.CLOSED]


def test_closed_window_starts_empty_after_half_open(clock):
    b, _ = make(
        clock,
        sliding_window_size=4,
        minimum_number_of_calls=2,
        wait_duration_in_open_state_s=1,
        permitted_number_of_calls_in_half_open_state=1,
    )
    calls(b, 2, fail=True)
    clock.advance(1)
    calls(b, 1)
    assert b.state is S.CLOSED
    calls(b, 1, fail=True)  # 1 call < minimum 2: the old failures are forgotten
    assert b.state is S.CLOSED and b.metrics().calls == 1


def test_half_open_failures_reopen(clock):
    b, events = half_open(clock, permitted_number_of_calls_in_half_open_state=2)
    calls(b, 1)
    calls(b, 1, fail=True)  # 50 % >= 50 %
    assert b.state is S.OPEN
    assert [e.to_state for e in events] == [S.OPEN, S.HALF_OPEN, S.OPEN]
    clock.advance(0.5)
    assert not b.try_acquire()  # a fresh wait started at the reopening
    clock.advance(0.5)
    assert b.try_acquire()


def test_release_returns_a_half_open_permit(clock):
    b, _ = half_open(clock, permitted_number_of_calls_in_half_open_state=1)
    assert b.try_acquire()
    assert not b.try_acquire()
    b.release()
    assert b.try_acquire()


def test_max_wait_in_half_open_goes_back_to_open(clock):
    b, _ = half_open(clock, max_wait_duration_in_half_open_state_s=2)
    assert b.try_acquire()
    clock.advance(2)
    assert b.state is S.OPEN


def test_forced_open_and_disabled_until_reset(clock):
    b, events = make(clock, sliding_window_size=1)
    b.force_open()
    clock.advance(3600)
    assert not b.try_acquire()
    b.disable()
    calls(b, 5, fail=True)
    assert b.state is S.DISABLED
    b.reset()
    assert b.state is S.CLOSED
    assert [e.to_state for e in events] == [S.FORCED_OPEN, S.DISABLED, S.CLOSED]


def test_outcomes_while_open_are_ignored(clock):
    b, events = make(clock, sliding_window_size=2, wait_duration_in_open_state_s=1)
    assert b.try_acquire() and b.try_acquire()
    b.on_error(0.01)
    b.on_error(0.01)
    assert b.state is S.OPEN
    b.on_success(0.01)  # a late answer of a call started while closed
    assert b.state is S.OPEN and len(events) == 1


def test_a_failing_listener_does_not_stop_others(clock):
    seen = []

    def bad(_):
        raise RuntimeError("boom")

    b = CircuitBreaker(
        ("m", "cpu"), BreakerConfig(sliding_window_size=1), clock=clock, listeners=(bad,)
    )
    b.add_listener(seen.append)
    calls(b, 1, fail=True)
    assert b.state is S.OPEN and len(seen) == 1


def test_config_validation_names_the_field():
    with pytest.raises(ValidationError, match="failure_rate_threshold"):
        BreakerConfig(failure_rate_threshold=0)
    with pytest.raises(ValidationError, match="sliding_window_type"):
        BreakerConfig(sliding_window_type="SESSION")


def test_registry_keys_by_model_and_pool_with_overrides(clock):
    events = []
    reg = BreakerRegistry(
        BreakerConfig(sliding_window_size=10),
        overrides={"big": BreakerConfig(sliding_window_size=1, wait_duration_in_open_state_s=1)},
        clock=clock,
        listeners=(events.append,),
    )
    assert reg.get("big", "gpu") is reg.get("big", "gpu")
    assert reg.get("big", "gpu") is not reg.get("big", "cpu")
    assert reg.get("small", "gpu").config.sliding_window_size == 10
    calls(reg.get("big", "gpu"), 1, fail=True)
    assert reg.states()[("big", "gpu")] is S.OPEN
    assert reg.states()[("big", "cpu")] is S.CLOSED
    clock.advance(1)
    reg.poll()
    assert [e.to_state for e in events] == [S.OPEN, S.HALF_OPEN]


def test_registry_is_bounded_and_keeps_open_breakers(clock):
    reg = BreakerRegistry(BreakerConfig(sliding_window_size=1), clock=clock, max_breakers=2)
    calls(reg.get("a", "gpu"), 1, fail=True)
    reg.get("b", "gpu")
    reg.get("c", "gpu")
    assert set(reg.states()) == {("a", "gpu"), ("c", "gpu")}
