"""The chain runner against a fake executor that implements ModelExecutor with real sleeps."""

from __future__ import annotations

import asyncio
import pickle
import time

import numpy as np
import pytest

from common.fallback_types import DeadlineTooShort, FallbackStep, RequestExpired
from fallbacks.breaker import BreakerConfig, BreakerRegistry, BreakerState
from fallbacks.chain import (
    ChainConfig,
    ChainRunner,
    ModelExecutor,
    ModelReply,
    PoolName,
    Target,
    compile_chain,
)
from fallbacks.deadline import Deadline
from fallbacks.pool_throttle import PoolThrottles
from fallbacks.request import FallbackRequest
from fallbacks.rules import RuleConfigError
from router.errors import DeadlineExceeded, InvalidRequest, ServiceUnavailable
from tests.support.clocks import FakeClock


class FakeExecutor(ModelExecutor):
    """Each (model, pool) behaves as scripted: 'ok', 'hang', 'raise', 'unavailable', 'bad-input',
    'expired' (the pool refused it unrun)."""

    def __init__(self, behaviour: dict[tuple[str, str], str], answer_s: float = 0.002) -> None:
        self.behaviour = behaviour
        self.answer_s = answer_s
        self.calls: list[tuple[str, str | None, str, float]] = []
        self.cancelled: list[tuple[str, str]] = []

    async def call_model(
        self, request, *, model: str, version: str | None, pool: PoolName, budget_s: float
    ) -> ModelReply:
        self.calls.append((model, version, pool, budget_s))
        what = self.behaviour.get((model, pool), "ok")
        try:
            if what == "hang":
                await asyncio.sleep(60)
            await asyncio.sleep(self.answer_s)
        except asyncio.CancelledError:
            self.cancelled.append((model, pool))
            raise
        if what == "raise":
            raise RuntimeError("CUDA error: device-side assert")
        if what == "unavailable":
            raise ServiceUnavailable("replica gone")
        if what == "expired":
            raise RequestExpired(f"{model}: deadline cannot be met (not run)")
        if what == "too_short":
            raise DeadlineTooShort(f"{model}: its deadline is shorter than its own work")
        if what == "bad-input":
            raise InvalidRequest("inputs.x: wrong shape", field="inputs.x")
        return ModelReply({"y": np.array([[1.0]]), "who": np.array([model])}, version or "7")


REQ = FallbackRequest(model="big", inputs={"x": np.zeros((1, 2), np.float32)}, text="hello")
CHAIN = compile_chain(
    [
        FallbackStep(kind="model", model="small", version="1"),
        FallbackStep(kind="cpu"),
        FallbackStep(
            kind="rules",
            rules=[
                {
                    "name": "greet",
                    "type": "keyword",
                    "keywords": ["hello"],
                    "outputs": {"y": [[0.5]]},
                }
            ],
        ),
        FallbackStep(kind="default", outputs={"y": [[0.0]]}),
    ]
)


def runner(ex, **kw) -> ChainRunner:
    return ChainRunner(ex, **kw)


async def test_primary_answer_is_not_degraded():
    ex = FakeExecutor({})
    res = await runner(ex).run(
        REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big", "2")
    )
    assert (res.served_by, res.degraded, res.reason, res.version) == ("gpu:big@2", False, None, "2")
    assert [c[0] for c in ex.calls] == ["big"]


async def test_hung_primary_is_abandoned_within_its_share_and_next_model_answers():
    ex = FakeExecutor({("big", "gpu"): "hang"})
    # A frozen clock: the budgets are the deadline's shares exactly, however loaded the machine
    # (the hang is still abandoned at its budget in real time).
    deadline = Deadline.after_ms(300, clock=FakeClock())
    t0 = time.monotonic()
    res = await runner(ex).run(REQ, deadline=deadline, chain=CHAIN, primary=Target("big", "2"))
    took = time.monotonic() - t0
    assert took < 5.0  # not a performance check: the hang lasts 60 s unless abandoned
    assert (res.served_by, res.degraded, res.reason) == ("model:small@1", True, "timeout")
    assert ex.cancelled == [("big", "gpu")]
    # the primary got half of (300 ms - 5 ms local reserve): it cannot have used the whole deadline
    assert ex.calls[0][3] == pytest.approx(0.1475, abs=1e-9)
    assert [a.outcome for a in res.attempts] == ["timeout", "ok"]


async def test_everything_remote_hangs_rules_answer_before_the_deadline():
    ex = FakeExecutor({("big", "gpu"): "hang", ("small", "gpu"): "hang", ("big", "cpu"): "hang"})
    deadline = Deadline.after_ms(300)
    res = await runner(ex).run(REQ, deadline=deadline, chain=CHAIN, primary=Target("big", "2"))
    assert (res.served_by, res.reason) == ("rules:greet", "timeout")
    # the remote steps were given at most the deadline minus the 5 ms kept for the rules step
    assert sum(c[3] for c in ex.calls) <= 0.300 - 0.005
    assert res.outputs["y"].tolist() == [[0.5]]
    assert [a.served_by for a in res.attempts] == [
        "gpu:big@2",
        "model:small@1",
        "cpu:big@2",
        "rules:greet",
    ]
    assert sorted(ex.cancelled) == [("big", "cpu"), ("big", "gpu"), ("small", "gpu")]


async def test_error_then_cpu_pool_then_default():
    ex = FakeExecutor({("big", "gpu"): "raise", ("small", "gpu"): "unavailable"})
    res = await runner(ex).run(
        REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big", None)
    )
    assert (res.served_by, res.reason) == ("cpu:big@7", "error: RuntimeError")
    assert [a.outcome for a in res.attempts][:2] == [
        "error: RuntimeError",
        "error: ServiceUnavailable",
    ]

    no_match = FallbackRequest(model="big", inputs=REQ.inputs, text="bye")
    ex2 = FakeExecutor({(m, p): "raise" for m in ("big", "small") for p in ("gpu", "cpu")})
    res2 = await runner(ex2).run(
        no_match, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big")
    )
    assert (res2.served_by, res2.degraded) == ("default", True)
    assert res2.attempts[-2].outcome == "no_match"


async def test_shed_request_goes_straight_to_fallback_with_reason():
    ex = FakeExecutor({})
    res = await runner(ex).run(
        REQ,
        deadline=Deadline.after_ms(1000),
        chain=CHAIN,
        primary=None,
        reason="shed",
        local_only=True,
    )
    assert (res.served_by, res.degraded, res.reason) == ("rules:greet", True, "shed")
    assert ex.calls == []


async def test_expired_deadline_starts_no_remote_work():
    ex = FakeExecutor({})
    deadline = Deadline.after_ms(1)
    await asyncio.sleep(0.005)
    res = await runner(ex).run(REQ, deadline=deadline, chain=CHAIN, primary=Target("big"))
    assert ex.calls == []
    assert (res.served_by, res.reason) == ("rules:greet", "expired")


async def test_empty_chain_raises_clear_errors():
    ex = FakeExecutor({("big", "gpu"): "hang"})
    with pytest.raises(DeadlineExceeded, match="no fallback chain") as ei:
        await runner(ex).run(REQ, deadline=Deadline.after_ms(200), chain=(), primary=Target("big"))
    assert ei.value.status_code == 504 and "gpu:big: timeout" in str(ei.value)
    ex2 = FakeExecutor({("big", "gpu"): "raise"})
    with pytest.raises(ServiceUnavailable, match="error: RuntimeError"):
        await runner(ex2).run(
            REQ, deadline=Deadline.after_ms(1000), chain=(), primary=Target("big")
        )


async def test_an_unanswered_request_says_whether_it_was_shed_or_refused():
    ex = FakeExecutor({("big", "gpu"): "expired"})
    with pytest.raises(ServiceUnavailable) as refused:
        await runner(ex).run(REQ, deadline=Deadline.after_ms(1000), chain=(),
                             primary=Target("big"))
    assert refused.value.cause == "refused"  # the pool refused it unrun
    with pytest.raises(ServiceUnavailable) as shed:
        await runner(ex).run(REQ, deadline=Deadline.after_ms(1000), chain=(), primary=None,
                             reason="shed: batch over capacity", local_only=True)
    assert shed.value.cause == "shed"
    with pytest.raises(ServiceUnavailable) as failed:
        await runner(FakeExecutor({("big", "gpu"): "raise"})).run(
            REQ, deadline=Deadline.after_ms(1000), chain=(), primary=Target("big"))
    assert failed.value.cause is None
    again = pickle.loads(pickle.dumps(refused.value))  # it crosses Ray handles
    assert (type(again), again.cause, again.message) == (
        ServiceUnavailable, "refused", refused.value.message)


async def test_a_deadline_shorter_than_the_work_is_the_callers_504_not_the_pools_load():
    """The pool refusing work whose own estimated time exceeds its deadline (DeadlineTooShort)
    is the deadline's fault: a 504, recorded as the budget gate's ``expired``; the throttle
    counts the pool as having done its part, and the breaker is untouched."""
    reg = BreakerRegistry(BreakerConfig(sliding_window_size=2, minimum_number_of_calls=2))
    th = PoolThrottles(k=2.0, clock=lambda: 0.0, rng=lambda: 1.0)
    r = runner(FakeExecutor({("big", "gpu"): "too_short"}), breakers=reg, throttles=th)
    for _ in range(4):
        with pytest.raises(DeadlineExceeded, match="gpu:big: expired") as ei:
            await r.run(REQ, deadline=Deadline.after_ms(1000), chain=(), primary=Target("big"))
        assert ei.value.status_code == 504 and ei.value.cause is None
    assert th.throttle("big", "gpu").reject_probability() == 0  # 4 requests, 4 accepted
    assert reg.get("big", "gpu").state is BreakerState.CLOSED
    res = await r.run(REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big"))
    assert (res.served_by, res.degraded, res.reason) == ("model:small@1", True, "expired")


async def test_exhausted_chain_raises():
    chain = compile_chain([FallbackStep(kind="model", model="small")])
    ex = FakeExecutor({("big", "gpu"): "raise", ("small", "gpu"): "raise"})
    with pytest.raises(ServiceUnavailable, match="every fallback step failed"):
        await runner(ex).run(
            REQ, deadline=Deadline.after_ms(1000), chain=chain, primary=Target("big")
        )


async def test_client_errors_propagate_instead_of_degrading():
    ex = FakeExecutor({("big", "gpu"): "bad-input"})
    with pytest.raises(InvalidRequest) as ei:
        await runner(ex).run(
            REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big")
        )
    assert ei.value.field == "inputs.x"


async def test_open_breaker_skips_the_step_and_timeouts_feed_it():
    reg = BreakerRegistry(  # only big's breaker can open within this test
        BreakerConfig(sliding_window_size=100, minimum_number_of_calls=100),
        overrides={"big": BreakerConfig(sliding_window_size=2, wait_duration_in_open_state_s=60)},
    )
    ex = FakeExecutor({("big", "gpu"): "hang"})
    r = runner(ex, breakers=reg)
    for _ in range(2):
        # On a frozen clock the 30 ms deadline cannot pass before the call (a loaded machine
        # made that "expired"); the hang is still abandoned at its real budget: a timeout.
        frozen = Deadline.after_ms(30, clock=FakeClock())
        res = await r.run(REQ, deadline=frozen, chain=CHAIN, primary=Target("big"))
        assert res.reason == "timeout"
    assert reg.get("big", "gpu").state is BreakerState.OPEN
    ex.calls.clear()
    res = await r.run(REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big"))
    assert (res.served_by, res.reason) == ("model:small@1", "breaker_open")
    assert [c[0] for c in ex.calls] == ["small"]
    # the skipped primary spent nothing: 'small' got half of (1000 - 5) ms, not half of what a
    # timed-out primary would have left (~250 ms)
    assert ex.calls[0][3] > 0.4


async def test_refusals_for_load_back_off_the_throttle_but_never_open_the_breaker():
    """A pool that refuses work it cannot finish in time (RequestExpired) is overloaded, not
    broken: its breaker opening would send every request to the fallback while it is open."""
    reg = BreakerRegistry(BreakerConfig(sliding_window_size=2, minimum_number_of_calls=2,
                                        wait_duration_in_open_state_s=60))
    th = PoolThrottles(k=2.0, clock=lambda: 0.0, rng=lambda: 1.0)  # never draws a rejection
    ex = FakeExecutor({("big", "gpu"): "expired"})
    r = runner(ex, breakers=reg, throttles=th)
    for _ in range(4):
        res = await r.run(REQ, deadline=Deadline.after_ms(1000), chain=CHAIN,
                          primary=Target("big"))
        assert (res.served_by, res.degraded) == ("model:small@1", True)
        assert res.attempts[0].outcome == "error: RequestExpired"
    assert reg.get("big", "gpu").state is BreakerState.CLOSED
    assert th.throttle("big", "gpu").reject_probability() > 0  # 4 requests, 0 accepted
    ex.behaviour[("big", "gpu")] = "raise"  # a fault still opens it
    for _ in range(2):
        await r.run(REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big"))
    assert reg.get("big", "gpu").state is BreakerState.OPEN


async def test_throttled_model_is_skipped_and_other_models_on_its_pool_are_not():
    clock_now = [0.0]
    rolls = [0.0]  # a throttle draws only when its reject probability is above 0
    th = PoolThrottles(k=1.0, clock=lambda: clock_now[0], rng=lambda: rolls.pop(0))
    ex = FakeExecutor({("big", "gpu"): "raise"})
    r = runner(ex, throttles=th)
    await r.run(REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big"))
    # 'big' failed once (p was 0): 1 request, 0 accepts, k=1 -> p = 1/2 for big@gpu only;
    # 'small' on the same pool answered and keeps p = 0
    assert th.throttle("big", "gpu").reject_probability() == pytest.approx(1 / 2)
    assert th.throttle("small", "gpu").reject_probability() == 0.0
    res = await r.run(REQ, deadline=Deadline.after_ms(1000), chain=CHAIN, primary=Target("big"))
    assert res.attempts[0].outcome == "throttled"  # roll 0.0 < 1/2
    assert (res.served_by, res.reason) == ("model:small@1", "throttled")
    assert rolls == []  # one draw, big@gpu's; small@gpu was never throttled


async def test_outer_cancellation_propagates_and_returns_half_open_permit():
    reg = BreakerRegistry(
        BreakerConfig(
            sliding_window_size=1,
            wait_duration_in_open_state_s=0.001,
            permitted_number_of_calls_in_half_open_state=1,
        )
    )
    b = reg.get("big", "gpu")
    b.try_acquire()
    b.on_error(0.0)
    await asyncio.sleep(0.002)
    assert b.state is BreakerState.HALF_OPEN
    ex = FakeExecutor({("big", "gpu"): "hang"})
    task = asyncio.create_task(
        runner(ex, breakers=reg).run(
            REQ, deadline=Deadline.after_ms(5000), chain=CHAIN, primary=Target("big")
        )
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b.try_acquire()  # the trial permit was given back


def test_compile_chain_names_the_bad_rule():
    with pytest.raises(
        RuleConfigError, match=r"fallback\[1\]\.rules\[0\] \(name='r'\): field 'pattern'"
    ):
        compile_chain(
            [
                FallbackStep(kind="model", model="small"),
                FallbackStep(
                    kind="rules",
                    rules=[{"name": "r", "type": "regex", "pattern": "[", "outputs": {"y": 1}}],
                ),
            ]
        )
    with pytest.raises(ValueError, match=r"fallback\[0\]\.outputs\.y"):
        compile_chain([FallbackStep(kind="default", outputs={"y": [[1], [2, 3]]})])


def test_chain_config_validation():
    with pytest.raises(ValueError, match="remote_share"):
        ChainConfig(remote_share=0)


async def test_model_steps_run_on_the_default_pool_so_no_gpu_breaker_without_a_gpu():
    # Regression: on a machine without a GPU pool a 'model' fallback step was sent to "gpu",
    # creating a breaker named "small@gpu" for a pool that does not exist.
    chain = compile_chain([FallbackStep(kind="model", model="small")])
    ex = FakeExecutor({("big", "cpu"): "raise"})
    reg = BreakerRegistry(BreakerConfig())
    res = await ChainRunner(ex, breakers=reg, default_pool="cpu").run(
        REQ, deadline=Deadline.after_ms(1000), chain=chain, primary=Target("big", pool="cpu"))
    assert res.served_by == "model:small@7"
    assert [c[2] for c in ex.calls] == ["cpu", "cpu"]
    assert all(pool == "cpu" for _, pool in reg.states())
