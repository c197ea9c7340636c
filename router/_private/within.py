"""``await within(coro, seconds)``: a coroutine's result, with a timer armed only if it waits.

The edge reads every body under a timeout (slow clients must not hold the ingress). Almost every
body is already in the server's buffer when the edge asks for it, so the ASGI ``receive``
coroutine returns without ever suspending. ``asyncio.timeout`` still schedules and cancels a
timer handle and enters and leaves its context each time: 6-7 µs per receive, against under 1 µs
here, of a cache hit's 100-130 µs in the ingress (docs/PERFORMANCE.md, twelfth session of
2026-11-24). ``within`` runs the coroutine's first step
itself. When that step finishes, the result is returned at once and no timer ever existed. When
it suspends, the rest of the coroutine runs under ``asyncio.timeout`` exactly as ``await`` would
have run it: the same future is awaited, and a timeout or a cancellation is thrown into the
coroutine where it waits, so its own clean-up runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Generator
from types import CoroutineType
from typing import Any, TypeVar

__all__ = ["within"]

T = TypeVar("T")


async def within(aw: Awaitable[T], timeout_s: float) -> T:
    """The result of ``aw``; ``TimeoutError`` if it has to wait longer than ``timeout_s``."""
    if type(aw) is not CoroutineType:  # a future or another awaitable: the plain way
        async with asyncio.timeout(timeout_s):
            return await aw
    coro: Coroutine[Any, Any, T] = aw
    try:
        pending = coro.send(None)
    except StopIteration as done:  # finished without waiting: no timer needed
        return done.value
    async with asyncio.timeout(timeout_s):
        return await _Rest(coro, pending)


class _Rest:
    """The rest of a coroutine that has already run up to its first wait (on ``pending``):
    what ``yield from`` would do with it, had the first step not been taken already."""

    __slots__ = ("coro", "pending")

    def __init__(self, coro: Coroutine[Any, Any, Any], pending: Any) -> None:
        self.coro = coro
        self.pending = pending

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, pending = self.coro, self.pending
        while True:
            try:
                sent = yield pending
            except BaseException as e:  # a cancellation or timeout: into the coroutine
                try:
                    pending = coro.throw(e)
                except StopIteration as done:
                    return done.value
            else:
                try:
                    pending = coro.send(sent)
                except StopIteration as done:
                    return done.value
