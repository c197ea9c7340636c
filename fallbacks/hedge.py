"""Hedged requests for the realtime class: a second attempt after a delay, first answer wins."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fallbacks.retry import RetryBudget

__all__ = ["hedged"]

T = TypeVar("T")


async def hedged(
    attempt: Callable[[int], Awaitable[T]],
    *,
    delay_s: float,
    max_attempts: int = 2,
    budget: RetryBudget | None = None,
) -> T:
    """Start ``attempt(0)``; if it has not answered after ``delay_s``, also start ``attempt(1)``...

    The first successful answer wins and the other attempts are cancelled. When every started
    attempt has failed, the next one starts at once (if any is left). When all fail, the last
    error is raised.
    Hedges (attempts after the first) withdraw from ``budget`` when one is given, so hedging
    cannot double the load on a slow pool. Bound: at most ``max_attempts`` concurrent calls.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if delay_s < 0:
        raise ValueError(f"delay_s must be >= 0, got {delay_s}")
    if budget is not None:
        budget.on_request()
    pending: set[asyncio.Future[T]] = set()
    started = 0
    hedging = True
    last_error: BaseException | None = None

    def start() -> bool:
        nonlocal started
        if started >= max_attempts:
            return False
        if started > 0 and budget is not None and not budget.try_withdraw():
            return False
        pending.add(asyncio.ensure_future(attempt(started)))
        started += 1
        return True

    start()
    try:
        while pending:
            timeout = delay_s if hedging and started < max_attempts else None
            done, _ = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:  # the delay passed without an answer: hedge (unless the budget is spent)
                hedging = start()
                continue
            for fut in done:
                pending.discard(fut)
                if fut.exception() is None:
                    return fut.result()
                last_error = fut.exception()
            if not pending:
                start()
        assert last_error is not None
        raise last_error
    finally:
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
