"""Client-side adaptive throttling where Timeshare calls its pools, one throttle per (model, pool).

SRE book, "Handling Overload": the caller counts its attempts and the backend's accepts over a
window and rejects locally with probability ``max(0, (requests - k*accepts) / (requests + 1))``
(``fallbacks.throttle.AdaptiveThrottle``). Keyed per (model, pool), like the circuit breakers, so
one broken or overloaded model cannot throttle the other models on the same pool (the reason the
chain runner's per-pool throttle was never switched on).

Wrap the pool call once, where the router calls a pool::

    throttles = PoolThrottles()
    reply = await throttles.call(model, pool, lambda: client.infer(work))

A locally rejected call raises :class:`PoolThrottled` (a 503-class error, so the fallback chain
degrades it at once, labelled ``throttled``) without touching the pool. What counts as the
backend *accepting* a call: any answer that is not an overload refusal. A reply for which
``refused(reply)`` is true (the pool's ``queue_full`` / ``expired`` refusals), a timeout, or an
error of status 5xx (or without a status) counts as not accepted; a 4xx error is the caller's
fault, so the backend did accept it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from common.clock import Clock
from fallbacks.throttle import AdaptiveThrottle

__all__ = ["PoolThrottled", "PoolThrottles"]

T = TypeVar("T")


class PoolThrottled(Exception):
    """Rejected locally by the adaptive throttle of (``model``, ``pool``); HTTP 503 class."""

    status_code = 503

    def __init__(self, model: str, pool: str, probability: float) -> None:
        super().__init__(f"{model}@{pool}: throttled locally (reject probability "
                         f"{probability:.2f}): the pool is refusing this model's requests")
        self.model = model
        self.pool = pool
        self.probability = probability


def _not_refused(_: Any) -> bool:
    return False


def _caller_fault(error: BaseException) -> bool:
    status = getattr(error, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500


class PoolThrottles:
    """One :class:`AdaptiveThrottle` per (model, pool); bounded at ``max_keys`` (least recently
    used key dropped: a model that is no longer called loses its history, which is harmless)."""

    def __init__(self, *, k: float = 2.0, window_s: float = 60.0, max_keys: int = 4096,
                 refused: Callable[[Any], bool] = _not_refused,
                 clock: Clock = time.monotonic,
                 rng: Callable[[], float] = random.random) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be >= 1, got {max_keys}")
        AdaptiveThrottle(k=k, window_s=window_s)  # validate k and window_s at construction
        self._k, self._window_s, self._max_keys = k, window_s, max_keys
        self._refused = refused
        self._clock, self._rng = clock, rng
        self._throttles: OrderedDict[tuple[str, str], AdaptiveThrottle] = OrderedDict()

    def throttle(self, model: str, pool: str) -> AdaptiveThrottle:
        """The throttle of (``model``, ``pool``), created on first use."""
        key = (model, pool)
        t = self._throttles.get(key)
        if t is None:
            t = AdaptiveThrottle(k=self._k, window_s=self._window_s, clock=self._clock,
                                 rng=self._rng)
            self._throttles[key] = t
            if len(self._throttles) > self._max_keys:
                self._throttles.popitem(last=False)
        else:
            self._throttles.move_to_end(key)
        return t

    def reject_probabilities(self) -> dict[str, float]:
        """``"model@pool"`` -> current local reject probability (non-zero ones), for status."""
        out = {f"{m}@{p}": t.reject_probability() for (m, p), t in self._throttles.items()}
        return {k: round(v, 3) for k, v in out.items() if v > 0}

    async def call(self, model: str, pool: str, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` unless the (model, pool) throttle rejects it (:class:`PoolThrottled`)."""
        t = self.throttle(model, pool)
        if not t.allow():
            raise PoolThrottled(model, pool, t.reject_probability())
        try:
            result = await fn()
        except BaseException as e:
            if _caller_fault(e):
                t.on_accepted()
            elif not isinstance(e, asyncio.CancelledError):  # a cancelled call says nothing
                t.on_rejected()
            raise
        if self._refused(result):
            t.on_rejected()
        else:
            t.on_accepted()
        return result
