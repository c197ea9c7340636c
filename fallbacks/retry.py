"""Retries of idempotent failures only, bounded by attempts, the deadline and a retry budget.

Model inference is a pure function, so re-running it is safe; what decides a retry is whether
the failure is transient and says nothing about the request (a replica died, a connection
dropped, the pool answered 503). Timeouts are not retried: the deadline is already spent, and the
fallback chain, not a retry, is the answer to a slow model.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fallbacks.deadline import Deadline
from fallbacks.errors import ServiceUnavailable, TimeshareError

__all__ = ["RetryBudget", "RetryPredicate", "is_idempotent_failure", "retry_call", "retry_failed"]

T = TypeVar("T")
RetryPredicate = Callable[[BaseException], bool]

# Ray's transient failures, matched by name so this module needs no Ray import.
_TRANSIENT_NAMES = frozenset(
    {
        "RayActorError",
        "ActorDiedError",
        "ActorUnavailableError",
        "ObjectLostError",
        "NodeDiedError",
        "WorkerCrashedError",
        "DeploymentUnavailableError",
    }
)


def is_idempotent_failure(exc: BaseException) -> bool:
    """True for failures worth retrying: transport errors, a lost replica, a 503.

    False for timeouts, cancellation, 4xx errors (the request is at fault) and everything else.
    An exception may opt in or out with a boolean ``retryable`` attribute.
    """
    flag = getattr(exc, "retryable", None)
    if isinstance(flag, bool):
        return flag
    if isinstance(exc, (asyncio.TimeoutError, asyncio.CancelledError)):
        return False
    if isinstance(exc, TimeshareError):
        return isinstance(exc, ServiceUnavailable)
    if isinstance(exc, ConnectionError):
        return True
    return any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__)


class RetryBudget:
    """Token bucket bounding retries to a ``ratio`` of requests (gRPC/Finagle style).

    Each request deposits ``ratio`` tokens, each retry withdraws one; the bucket holds at most
    ``max_tokens`` (the bound on a retry burst) and starts with ``initial_tokens``. With
    ``ratio=0.1`` retries add at most ~10 % load to a failing pool.
    """

    def __init__(
        self, *, ratio: float = 0.1, max_tokens: float = 10.0, initial_tokens: float | None = None
    ) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {ratio}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.ratio = ratio
        self.max_tokens = max_tokens
        self._tokens = max_tokens if initial_tokens is None else min(initial_tokens, max_tokens)
        self._lock = threading.Lock()

    @property
    def tokens(self) -> float:
        """Tokens available now."""
        return self._tokens

    def on_request(self) -> None:
        """Count one original request (not a retry)."""
        with self._lock:
            self._tokens = min(self.max_tokens, self._tokens + self.ratio)

    def try_withdraw(self) -> bool:
        """Take one token for a retry; False when the budget is spent."""
        with self._lock:
            if self._tokens >= 1.0 - 1e-9:  # ten deposits of 0.1 make one token
                self._tokens = max(0.0, self._tokens - 1.0)
                return True
            return False


async def retry_call(
    attempt: Callable[[], Awaitable[T]],
    *,
    deadline: Deadline,
    budget: RetryBudget,
    max_attempts: int = 3,
    is_retryable: RetryPredicate = is_idempotent_failure,
    backoff_s: float = 0.005,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """Run ``attempt()``; retry a retryable failure while attempts, budget and deadline allow.

    ``max_attempts`` counts the first call (bound: at most ``max_attempts`` calls). Backoff
    doubles from ``backoff_s`` and never sleeps past the deadline. The last error is re-raised.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    budget.on_request()
    try:
        return await attempt()
    except BaseException as e:
        return await retry_failed(e, attempt, deadline=deadline, budget=budget,
                                  retries=max_attempts - 1, is_retryable=is_retryable,
                                  backoff_s=backoff_s, sleep=sleep)


async def retry_failed(
    error: BaseException,
    attempt: Callable[[], Awaitable[T]],
    *,
    deadline: Deadline,
    budget: RetryBudget,
    retries: int,
    is_retryable: RetryPredicate = is_idempotent_failure,
    backoff_s: float = 0.005,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """``retry_call`` after its first attempt failed with ``error`` (the caller made that
    attempt itself and deposited ``budget.on_request()``): at most ``retries`` more calls.
    A caller whose first attempt succeeds never builds a closure, a deadline or this frame."""
    delay = backoff_s
    while True:
        if (
            retries < 1
            or not is_retryable(error)
            or deadline.remaining() <= delay
            or not budget.try_withdraw()
        ):
            raise error
        if delay > 0:
            await sleep(delay)
        delay *= 2
        retries -= 1
        try:
            return await attempt()
        except BaseException as e:
            error = e
