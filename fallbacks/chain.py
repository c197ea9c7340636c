"""The fallback chain runner: primary call, then each fallback step in order, within a deadline.

Seams for the router (no Ray here):

* :class:`ModelExecutor` — the router implements ``call_model`` by calling the GPU or CPU pool
  deployment through its handle with ``budget_s`` as the hop's deadline.
* :func:`compile_chain` — run once per model config at load time (rule validation errors surface
  then, naming ``fallback[i].rules[j]``), the result stored with the model.
* :meth:`ChainRunner.run` — one call per request; returns a :class:`ChainResult` or raises
  ``DeadlineExceeded`` (504) / ``ServiceUnavailable`` (503).

Budgets: a remote step (the primary, ``model``, ``cpu``) may use the remaining time minus
``local_reserve_ms`` when a rules/default step follows it, and only ``remote_share`` of that when
more remote steps follow, so a hung primary still leaves time for the next model. A remote step
whose deadline has passed is not started (``expired``), and a pool's refusal of work whose
deadline is shorter than its own estimated work (``DeadlineTooShort``) is recorded the same way:
the caller's deadline, a 504 if nothing else answers, not the pool's load (503). Rules and
default steps always run, as they are bounded by configuration (declarative rules take
microseconds, callables have a timeout).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from common.clock import Clock
from common.fallback_types import DeadlineTooShort, RequestExpired
from fallbacks._private.shared_timeout import SharedTimeouts
from fallbacks.breaker import BreakerRegistry, CircuitBreaker
from fallbacks.deadline import Deadline
from fallbacks.errors import DeadlineExceeded, ServiceUnavailable, TimeshareError
from fallbacks.pool_throttle import PoolThrottles
from fallbacks.request import FallbackRequest
from fallbacks.steps import (
    CompiledStep,
    PoolName,
    Target,
    compile_chain,
    follows,
    step_target,
)
from fallbacks.throttle import AdaptiveThrottle

__all__ = ["POOL_REFUSALS", "Attempt", "ChainConfig", "ChainResult", "ChainRunner", "CompiledStep",
           "ModelAnswer", "ModelExecutor", "ModelReply", "PoolName", "Target", "compile_chain"]

# A pool's refusals (asyncio.QueueFull, pool.errors.RequestExpired) as a failed step's outcome,
# hence as a degraded answer's reason: the request was refused unrun, not failed.
POOL_REFUSALS = frozenset({"error: QueueFull", "error: RequestExpired"})

_Gates = tuple[CircuitBreaker | None, AdaptiveThrottle | None]  # a remote call's breaker, throttle


class ModelAnswer(Protocol):
    """What the chain reads of a model call's reply. A pool's reply (``pool.work.PoolReply``)
    has all of it, so it comes back to the router as it is, not copied into another type per
    request; :class:`ModelReply` is the plain one for other executors (and tests)."""

    @property
    def outputs(self) -> Mapping[str, Any]: ...
    @property
    def version(self) -> str | None: ...
    @property
    def queue_ms(self) -> float: ...
    @property
    def compute_ms(self) -> float: ...
    @property
    def swap_ms(self) -> float: ...
    @property
    def received_at(self) -> float: ...


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class ModelReply:
    """What a model call returns: outputs, the version that actually ran (if known), and where
    its time went (as the pool measured it), so timings come back inside the answer.
    ``received_at``: wall-clock second at which the pool took the call (0.0: unknown)."""

    outputs: Mapping[str, Any]
    version: str | None = None
    queue_ms: float = 0.0
    compute_ms: float = 0.0
    swap_ms: float = 0.0
    received_at: float = 0.0


class ModelExecutor(Protocol):
    """Runs one model call on a pool; implemented by the router over Ray handles."""

    async def call_model(
        self,
        request: FallbackRequest,
        *,
        model: str,
        version: str | None,
        pool: PoolName,
        budget_s: float,
    ) -> ModelAnswer:
        """Answer within ``budget_s`` seconds or raise; the runner cancels it at the budget."""
        ...


class ChainConfig(BaseModel):
    """How the runner splits a deadline between steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    local_reserve_ms: float = Field(
        5.0, ge=0, description="Kept back from remote steps when a rules/default step follows."
    )
    remote_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of the remote budget a remote step may use when "
        "other remote steps follow it.",
    )
    min_remote_budget_ms: float = Field(
        1.0, ge=0, description="A remote step with less time than this is not started."
    )


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class Attempt:
    """One step tried: who (``served_by`` label), what happened, how long it took."""

    served_by: str
    outcome: str  # ok | timeout | error: <Type> | breaker_open | throttled | expired | no_match
    elapsed_s: float


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class ChainResult:
    """The answer. ``degraded`` answers carry ``served_by`` and the first failure as ``reason``;
    ``reply`` is the model call's reply and ``pool`` the pool that ran it when a model answered
    (both None for rules and defaults)."""

    outputs: Mapping[str, Any]
    served_by: str
    degraded: bool
    reason: str | None
    model: str | None
    version: str | None
    attempts: tuple[Attempt, ...]
    elapsed_s: float
    reply: ModelAnswer | None = None
    pool: str | None = None


# outputs, served_by, model, version, and the model's reply (None for local steps)
_StepAnswer = tuple[Mapping[str, Any], str, "str | None", "str | None", "ModelAnswer | None"]


def _first_failure(attempts: list[Attempt]) -> str | None:
    return next((a.outcome for a in attempts if a.outcome != "ok"), None)


def _result(res: _StepAnswer, step: CompiledStep | None, target: Target | None,
            reason: str | None, attempts: list[Attempt], elapsed_s: float) -> ChainResult:
    """The chain's answer from the step that answered: ``step`` None for the primary, whose
    answer is never degraded; a fallback step's answer is, labelled with ``reason``."""
    outputs, served_by, model, version, reply = res
    degraded = step is not None
    return ChainResult(outputs=outputs, served_by=served_by, degraded=degraded,
                       reason=reason if degraded else None, model=model, version=version,
                       attempts=tuple(attempts), elapsed_s=elapsed_s, reply=reply,
                       pool=target.pool if target is not None else None)


class ChainRunner:
    """Runs a primary call and its fallback chain within a :class:`Deadline`.

    ``breakers`` and ``throttles`` (SRE client-side adaptive throttling), both per (model,
    pool), are optional guards: an open breaker or a throttled (model, pool) makes the runner
    skip that step at once, so one broken model never throttles the others on its pool.
    """

    def __init__(
        self,
        executor: ModelExecutor,
        *,
        config: ChainConfig | None = None,
        breakers: BreakerRegistry | None = None,
        throttles: PoolThrottles | None = None,
        clock: Clock = time.monotonic,
        default_pool: PoolName = "gpu",
    ) -> None:
        self._executor = executor
        # Where a fallback model step runs: "cpu" on a machine without a GPU pool, so no
        # breaker named "<model>@gpu" exists there.
        self._default_pool: PoolName = default_pool
        self.config = config or ChainConfig()
        self._breakers = breakers
        self._throttles = throttles
        self._clock = clock
        self._timeouts = SharedTimeouts()

    async def run(
        self,
        request: FallbackRequest,
        *,
        deadline: Deadline,
        chain: Sequence[CompiledStep],
        primary: Target | None,
        reason: str | None = None,
        local_only: bool = False,
    ) -> ChainResult:
        """Answer ``request``: ``primary`` first (None when shed), then ``chain`` in order.

        ``reason`` labels why the primary was skipped (e.g. ``"shed"``); ``local_only`` skips
        remote fallback steps (e.g. when the whole service is shedding).
        """
        t0 = self._clock()
        attempts: list[Attempt] = []
        if primary is not None:  # the common case: no fallback plan is built unless it fails
            after = follows(chain, local_only)
            res = await self._remote(request, deadline, primary, primary.pool, after, attempts)
            if res is not None:
                return _result(res, None, primary, reason, attempts, self._clock() - t0)
        steps: list[tuple[CompiledStep, Target | None]] = []
        for s in chain:
            if s.local:
                steps.append((s, None))
            elif not local_only:
                steps.append((s, step_target(s, primary, request, self._default_pool)))
        for i, (step, target) in enumerate(steps):
            if target is not None:
                rest = [s for s, _ in steps[i + 1:]]
                res = await self._remote(request, deadline, target, step.kind,
                                         follows(rest, False), attempts)
            else:
                res = await self._local(request, deadline, step, attempts)
            if res is not None:
                return _result(res, step, target, reason or _first_failure(attempts), attempts,
                               self._clock() - t0)
        raise self._exhausted(request, deadline, attempts, reason, bool(chain))

    def _budget(self, deadline: Deadline, after: tuple[bool, bool]) -> float:
        """A remote step's budget: ``after`` says whether a (local, remote) step comes after."""
        c = self.config
        local_follows, remote_follows = after
        reserve = c.local_reserve_ms / 1000.0 if local_follows else 0.0
        avail = deadline.budget(margin_s=reserve)
        return avail * c.remote_share if remote_follows else avail

    def _admit(self, prefix: str, deadline: Deadline, budget: float, target: Target,
               attempts: list[Attempt]) -> _Gates | None:
        """``(breaker, throttle)`` (None where not configured) when the call may go out; None,
        with the reason in ``attempts``, when the budget, breaker or throttle says no."""
        if deadline.expired() or budget * 1000.0 < self.config.min_remote_budget_ms:
            _refused(attempts, prefix, target, "expired")
            return None
        breaker = self._breakers.get(target.model, target.pool) if self._breakers else None
        if breaker is not None and not breaker.try_acquire():
            _refused(attempts, prefix, target, "breaker_open")
            return None
        throttle = (self._throttles.throttle(target.model, target.pool)
                    if self._throttles is not None else None)
        if throttle is not None and not throttle.allow():
            if breaker is not None:
                breaker.release()
            _refused(attempts, prefix, target, "throttled")
            return None
        return breaker, throttle

    async def _remote(
        self,
        request: FallbackRequest,
        deadline: Deadline,
        target: Target,
        prefix: str,
        after: tuple[bool, bool],
        attempts: list[Attempt],
    ) -> _StepAnswer | None:
        budget = self._budget(deadline, after)
        admitted = self._admit(prefix, deadline, budget, target, attempts)
        if admitted is None:
            return None
        breaker, throttle = admitted
        t0 = self._clock()
        call = self._executor.call_model(
            request, model=target.model, version=target.version, pool=target.pool, budget_s=budget
        )
        try:
            # asyncio.timeout's semantics, not wait_for: no extra task per call on the request
            # path; and a loop timer shared per millisecond, not one per call
            async with self._timeouts.after(budget):
                reply = await call
        except asyncio.CancelledError:
            if breaker is not None:
                breaker.release()
            raise
        except TimeshareError as e:
            if e.status_code < 500:  # the caller's fault: no fallback would be right either
                if breaker is not None:
                    breaker.release()
                if throttle is not None:
                    throttle.on_accepted()  # the pool did its part
                raise
            outcome = f"error: {type(e).__name__}"
        except asyncio.TimeoutError:
            outcome = "timeout"
        except DeadlineTooShort:  # its deadline, not the pool's load: as the budget gate's
            if breaker is not None:  # "expired" (a 504 if nothing else answers)
                breaker.release()
            if throttle is not None:
                throttle.on_accepted()  # the pool answered at once, as asked
            attempts.append(Attempt(_label(prefix, target.model, target.version), "expired",
                                    self._clock() - t0))
            return None
        except RequestExpired:  # refused unrun behind the queue: load for the throttle, not a
            if breaker is not None:  # fault (an overloaded pool would open its breaker)
                breaker.release()
            breaker, outcome = None, "error: RequestExpired"
        except Exception as e:  # noqa: BLE001 - any model failure degrades
            outcome = f"error: {type(e).__name__}"
        else:
            return self._answered(reply, self._clock() - t0, breaker, throttle, prefix, target,
                                  attempts)
        elapsed = self._clock() - t0
        if breaker is not None:
            breaker.on_error(elapsed)
        if throttle is not None:
            throttle.on_rejected()
        attempts.append(Attempt(_label(prefix, target.model, target.version), outcome, elapsed))
        return None

    @staticmethod
    def _answered(reply: ModelAnswer, elapsed: float, breaker: CircuitBreaker | None,
                  throttle: AdaptiveThrottle | None, prefix: str, target: Target,
                  attempts: list[Attempt]) -> _StepAnswer:
        if breaker is not None:
            breaker.on_success(elapsed)
        if throttle is not None:
            throttle.on_accepted()
        version = reply.version or target.version
        label = _label(prefix, target.model, version)
        attempts.append(Attempt(label, "ok", elapsed))
        return reply.outputs, label, target.model, version, reply

    async def _local(
        self,
        request: FallbackRequest,
        deadline: Deadline,
        step: CompiledStep,
        attempts: list[Attempt],
    ) -> _StepAnswer | None:
        if step.kind == "default":
            assert step.outputs is not None
            attempts.append(Attempt("default", "ok", 0.0))
            return step.outputs, "default", None, None, None
        assert step.engine is not None
        t0 = self._clock()
        budget = max(deadline.remaining(), self.config.local_reserve_ms / 1000.0)
        match = await step.engine.evaluate(request, budget_s=budget)
        elapsed = self._clock() - t0
        if match is None:
            attempts.append(Attempt("rules", "no_match", elapsed))
            return None
        label = f"rules:{match.rule}"
        attempts.append(Attempt(label, "ok", elapsed))
        return match.outputs, label, None, None, None

    def _exhausted(
        self,
        request: FallbackRequest,
        deadline: Deadline,
        attempts: list[Attempt],
        reason: str | None,
        has_chain: bool,
    ) -> TimeshareError:
        tried = "; ".join(f"{a.served_by}: {a.outcome}" for a in attempts) or "nothing tried"
        head = f"model {request.model!r}: " + (
            "every fallback step failed" if has_chain else "no fallback chain is configured"
        )
        if reason:
            head += f" (primary skipped: {reason})"
        timed_out = deadline.expired() or any(a.outcome in ("timeout", "expired") for a in attempts)
        cls = DeadlineExceeded if timed_out else ServiceUnavailable
        cause = "shed" if reason else (
            "refused" if _first_failure(attempts) in POOL_REFUSALS else None)
        return cls(f"{head}; tried {tried}", cause=cause)


def _refused(attempts: list[Attempt], prefix: str, target: Target, outcome: str) -> None:
    """Record a step the gates refused (its label is built only then, not for every call)."""
    attempts.append(Attempt(_label(prefix, target.model, target.version), outcome, 0.0))


def _label(prefix: str, model: str, version: str | None) -> str:
    return f"{prefix}:{model}@{version}" if version else f"{prefix}:{model}"
