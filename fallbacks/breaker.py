"""Circuit breakers per (model, pool) with resilience4j semantics.

States: CLOSED → (failure or slow-call rate over threshold, once the window holds at least
``minimum_number_of_calls``) → OPEN → (after ``wait_duration_in_open_state_s``) → HALF_OPEN →
(after ``permitted_number_of_calls_in_half_open_state`` trial calls) CLOSED or OPEN again.
FORCED_OPEN and DISABLED are manual states that only :meth:`CircuitBreaker.reset` leaves.

The open → half-open move needs no timer: it happens on the first look at the breaker after the
wait (any call of ``state``, ``try_acquire``, ``poll``...), so listeners see it at that moment.
Call :meth:`BreakerRegistry.poll` periodically if alerts must fire without traffic.

Usage by a caller::

    if not breaker.try_acquire():
        ...  # skip: reason "breaker_open"
    t0 = clock()
    try:
        out = await call()
    except Exception:
        breaker.on_error(clock() - t0)
        raise
    breaker.on_success(clock() - t0)
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.clock import Clock
from fallbacks._private.windows import CountWindow, TimeWindow, Totals

__all__ = [
    "BreakerConfig",
    "BreakerMetrics",
    "BreakerRegistry",
    "BreakerState",
    "CircuitBreaker",
    "StateTransition",
    "TransitionListener",
]

log = logging.getLogger(__name__)


class BreakerState(str, enum.Enum):
    """Breaker states (resilience4j names)."""

    CLOSED = "CLOSED"
    OPEN = "OPEN"
    HALF_OPEN = "HALF_OPEN"
    FORCED_OPEN = "FORCED_OPEN"
    DISABLED = "DISABLED"


class BreakerConfig(BaseModel):
    """Breaker settings. Defaults suit model serving (resilience4j's are for minutes-long waits)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sliding_window_type: Literal["COUNT_BASED", "TIME_BASED"] = Field(
        "COUNT_BASED", description="COUNT_BASED: last N calls; TIME_BASED: calls of the last N s."
    )
    sliding_window_size: int = Field(
        50, ge=1, le=100_000, description="N calls (COUNT_BASED) or N seconds (TIME_BASED)."
    )
    minimum_number_of_calls: int = Field(
        20, ge=1, description="Calls needed in the window before rates are computed."
    )
    failure_rate_threshold: float = Field(
        50.0, gt=0, le=100, description="Open when the failure rate (%) is at or above this."
    )
    slow_call_rate_threshold: float = Field(
        100.0, gt=0, le=100, description="Open when the slow-call rate (%) is at or above this."
    )
    slow_call_duration_threshold_s: float = Field(
        1.0, gt=0, description="A call at least this long counts as slow."
    )
    wait_duration_in_open_state_s: float = Field(
        5.0, gt=0, description="Time spent OPEN before trial calls are let through."
    )
    permitted_number_of_calls_in_half_open_state: int = Field(
        5, ge=1, le=10_000, description="Trial calls in HALF_OPEN; all must be recorded to decide."
    )
    max_wait_duration_in_half_open_state_s: float = Field(
        0.0, ge=0, description="Back to OPEN if HALF_OPEN lasts longer; 0 waits for the trials."
    )

    @field_validator("sliding_window_type", mode="before")
    @classmethod
    def _upper(cls, v: object) -> object:
        return v.upper() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _cap_min_calls(self) -> BreakerConfig:
        # resilience4j: a count window can never hold more than its size.
        if self.sliding_window_type == "COUNT_BASED" and (
            self.minimum_number_of_calls > self.sliding_window_size
        ):
            object.__setattr__(self, "minimum_number_of_calls", self.sliding_window_size)
        return self


@dataclass(frozen=True, slots=True)
class BreakerMetrics:
    """A breaker's window. Rates are -1.0 until ``minimum_number_of_calls`` are recorded."""

    state: BreakerState
    calls: int
    failed_calls: int
    slow_calls: int
    failure_rate: float
    slow_call_rate: float
    not_permitted_calls: int


@dataclass(frozen=True, slots=True)
class StateTransition:
    """One state change of the breaker of ``key`` = (model, pool), at clock time ``at``."""

    key: tuple[str, str]
    from_state: BreakerState
    to_state: BreakerState
    at: float
    metrics: BreakerMetrics


TransitionListener = Callable[[StateTransition], None]


class CircuitBreaker:
    """One breaker. Thread-safe; listeners run outside the lock and may not break it."""

    def __init__(
        self,
        key: tuple[str, str],
        config: BreakerConfig | None = None,
        *,
        clock: Clock = time.monotonic,
        listeners: tuple[TransitionListener, ...] = (),
    ) -> None:
        self.key = key
        self.config = config or BreakerConfig()
        self._clock = clock
        self._listeners = list(listeners)
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._since = clock()
        self._window: CountWindow | TimeWindow = self._closed_window()
        self._min_calls = self.config.minimum_number_of_calls
        self._permits_left = 0
        self._not_permitted = 0

    # -- public API ------------------------------------------------------------------------

    @property
    def state(self) -> BreakerState:
        """Current state (applies a due open → half-open move first)."""
        self.poll()
        return self._state

    def add_listener(self, listener: TransitionListener) -> None:
        """Call ``listener(StateTransition)`` on every state change."""
        self._listeners.append(listener)

    def poll(self) -> None:
        """Apply time-driven transitions that are due (open → half-open, half-open timeout)."""
        with self._lock:
            events = self._advance(self._clock())
        self._emit(events)

    def try_acquire(self) -> bool:
        """Ask to make a call. False means skip it (OPEN, FORCED_OPEN, or no trial permit)."""
        if self._state is BreakerState.CLOSED:
            # Every call's question: CLOSED has no time-driven move and always permits. A move
            # to OPEN racing this read from another thread is the same as asking a moment
            # earlier.
            return True
        with self._lock:
            events = self._advance(self._clock())
            ok = self._permit()
            if not ok:
                self._not_permitted += 1
        self._emit(events)
        return ok

    def release(self) -> None:
        """Give back a permit whose call was not made or whose outcome must be ignored."""
        with self._lock:
            if self._state is BreakerState.HALF_OPEN:
                self._permits_left = min(
                    self._permits_left + 1, self.config.permitted_number_of_calls_in_half_open_state
                )

    def on_success(self, duration_s: float) -> None:
        """Record a call that answered (slow if ``duration_s`` reaches the slow threshold)."""
        self._record(duration_s, failed=False)

    def on_error(self, duration_s: float) -> None:
        """Record a call that failed or timed out."""
        self._record(duration_s, failed=True)

    def force_open(self) -> None:
        """Reject every call until :meth:`reset`."""
        self._manual(BreakerState.FORCED_OPEN)

    def disable(self) -> None:
        """Permit every call and record nothing until :meth:`reset`."""
        self._manual(BreakerState.DISABLED)

    def reset(self) -> None:
        """Back to CLOSED with an empty window."""
        self._manual(BreakerState.CLOSED)

    def metrics(self) -> BreakerMetrics:
        """Snapshot of the current window."""
        with self._lock:
            events = self._advance(self._clock())
            m = self._metrics(self._window.snapshot(self._clock()))
        self._emit(events)
        return m

    # -- internals (lock held) --------------------------------------------------------------

    def _closed_window(self) -> CountWindow | TimeWindow:
        c = self.config
        if c.sliding_window_type == "TIME_BASED":
            return TimeWindow(c.sliding_window_size)
        return CountWindow(c.sliding_window_size)

    def _permit(self) -> bool:
        if self._state in (BreakerState.CLOSED, BreakerState.DISABLED):
            return True
        if self._state is BreakerState.HALF_OPEN and self._permits_left > 0:
            self._permits_left -= 1
            return True
        return False

    def _record(self, duration_s: float, *, failed: bool) -> None:
        now = self._clock()
        slow = duration_s >= self.config.slow_call_duration_threshold_s
        with self._lock:
            events = self._advance(now)
            if self._state in (BreakerState.CLOSED, BreakerState.HALF_OPEN):
                self._window.record(now, failed=failed, slow=slow)
                events += self._evaluate(now)
        self._emit(events)

    def _evaluate(self, now: float) -> list[StateTransition]:
        # counts, not a Totals: this runs on every call's outcome (a frozen dataclass per call
        # cost more than the rest of the check)
        calls, failed, slow = self._window.counts(now)
        if calls < self._min_calls:
            return []
        over = self._over_thresholds(calls, failed, slow)
        if self._state is BreakerState.CLOSED and over:
            return self._to(BreakerState.OPEN, now)
        if self._state is BreakerState.HALF_OPEN:
            return self._to(BreakerState.OPEN if over else BreakerState.CLOSED, now)
        return []

    def _over_thresholds(self, calls: int, failed: int, slow: int) -> bool:
        c = self.config
        return (
            100.0 * failed / calls >= c.failure_rate_threshold
            or 100.0 * slow / calls >= c.slow_call_rate_threshold
        )

    def _advance(self, now: float) -> list[StateTransition]:
        c = self.config
        if (
            self._state is BreakerState.OPEN
            and now - self._since >= c.wait_duration_in_open_state_s
        ):
            return self._to(BreakerState.HALF_OPEN, now)
        if (
            self._state is BreakerState.HALF_OPEN
            and c.max_wait_duration_in_half_open_state_s > 0
            and now - self._since >= c.max_wait_duration_in_half_open_state_s
        ):
            return self._to(BreakerState.OPEN, now)
        return []

    def _to(self, new: BreakerState, now: float) -> list[StateTransition]:
        old = self._state
        before = self._metrics(self._window.snapshot(now))
        self._state, self._since = new, now
        c = self.config
        if new is BreakerState.HALF_OPEN:
            n = c.permitted_number_of_calls_in_half_open_state
            self._window, self._min_calls, self._permits_left = CountWindow(n), n, n
        elif new is BreakerState.CLOSED:
            self._window, self._min_calls = self._closed_window(), c.minimum_number_of_calls
        if old is new:
            return []
        return [StateTransition(self.key, old, new, now, before)]

    def _manual(self, new: BreakerState) -> None:
        with self._lock:
            now = self._clock()
            events = self._to(new, now)
            if new is BreakerState.CLOSED:
                self._not_permitted = 0
        self._emit(events)

    def _metrics(self, t: Totals) -> BreakerMetrics:
        ready = t.calls >= self._min_calls and t.calls > 0
        return BreakerMetrics(
            state=self._state,
            calls=t.calls,
            failed_calls=t.failed,
            slow_calls=t.slow,
            failure_rate=100.0 * t.failed / t.calls if ready else -1.0,
            slow_call_rate=100.0 * t.slow / t.calls if ready else -1.0,
            not_permitted_calls=self._not_permitted,
        )

    def _emit(self, events: list[StateTransition]) -> None:
        for ev in events:
            for listener in list(self._listeners):
                try:
                    listener(ev)
                except Exception:  # one bad listener never stops the others or the caller
                    log.exception("breaker listener %r failed on %s", listener, ev)


class BreakerRegistry:
    """Breakers keyed by (model, pool), created on first use.

    ``overrides`` maps a model name to its own :class:`BreakerConfig`. The registry holds at most
    ``max_breakers`` breakers (keys come from the model repository, so the bound is a guard):
    past it, the least recently used CLOSED breaker is dropped (it holds no state worth keeping
    beyond its window).
    """

    def __init__(
        self,
        default: BreakerConfig | None = None,
        *,
        overrides: Mapping[str, BreakerConfig] | None = None,
        clock: Clock = time.monotonic,
        listeners: tuple[TransitionListener, ...] = (),
        max_breakers: int = 4096,
    ) -> None:
        self.default = default or BreakerConfig()
        self._overrides = dict(overrides or {})
        self._clock = clock
        self._listeners = tuple(listeners)
        self._max = max_breakers
        self._lock = threading.Lock()
        self._breakers: OrderedDict[tuple[str, str], CircuitBreaker] = OrderedDict()

    def get(self, model: str, pool: str) -> CircuitBreaker:
        """The breaker of (model, pool), created with the model's config if new."""
        key = (model, pool)
        with self._lock:
            b = self._breakers.get(key)
            if b is None:
                b = CircuitBreaker(
                    key,
                    self._overrides.get(model, self.default),
                    clock=self._clock,
                    listeners=self._listeners,
                )
                self._breakers[key] = b
                self._trim()
            else:
                self._breakers.move_to_end(key)
            return b

    def poll(self) -> None:
        """Apply due time-driven transitions on every breaker (fires their listeners)."""
        with self._lock:
            breakers = list(self._breakers.values())
        for b in breakers:
            b.poll()

    def states(self) -> dict[tuple[str, str], BreakerState]:
        """Current state of every breaker."""
        with self._lock:
            breakers = list(self._breakers.items())
        return {k: b.state for k, b in breakers}

    def _trim(self) -> None:
        while len(self._breakers) > self._max:
            victim = next(
                (k for k, b in self._breakers.items() if b._state is BreakerState.CLOSED), None
            )
            if victim is None:
                return
            del self._breakers[victim]
