"""Single flight, driven by its callers: concurrent requests for the same key share one
execution, which the first of them runs itself.

``join(key)`` makes the first caller of a key its leader (it runs the work, on its own path, and
then ``settle``s or ``fail``s the flight); callers that join meanwhile wait for the leader's
result. An error is shared once: the followers get it, and the key is free again for the next
caller. A leader that is cancelled abandons its flight: its followers look again, and one of
them leads (so a caller that goes away never takes the others' answers with it). The map holds
at most one entry per distinct key in flight (bounded by concurrent requests).
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Flights"]


class _Abandoned(Exception):
    """The leader went away before it had a result: the followers look again."""


class Flights(Generic[T]):
    """Deduplicate concurrent work by key; the work runs in the leader's own task."""

    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[T]] = {}

    def __len__(self) -> int:
        return len(self._futures)

    async def join(self, key: str) -> tuple[bool, T | None]:
        """``(True, None)``: no flight for ``key``: the caller leads it and must :meth:`settle`
        it, or :meth:`fail` it; ``(False, result)``: the leader's result (its error is raised)."""
        while True:
            fut = self._futures.get(key)
            if fut is None:
                self._futures[key] = asyncio.get_running_loop().create_future()
                return True, None
            try:
                return False, await asyncio.shield(fut)
            except _Abandoned:
                continue

    def settle(self, key: str, result: T) -> None:
        """The leader's result for ``key``, to every follower (a no-op once settled)."""
        fut = self._futures.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(result)

    def fail(self, key: str, error: BaseException) -> None:
        """The leader failed with ``error``: the followers get it too, except a cancellation,
        which abandons the flight (they look again). A no-op once settled."""
        fut = self._futures.pop(key, None)
        if fut is None or fut.done():
            return
        fut.set_exception(_Abandoned() if isinstance(error, asyncio.CancelledError) else error)
        fut.exception()  # retrieved: there may be no follower to raise it to

    async def wait_idle(self) -> None:
        """Wait until no flight is open (used by ``close``)."""
        while self._futures:
            await asyncio.gather(*list(self._futures.values()), return_exceptions=True)
