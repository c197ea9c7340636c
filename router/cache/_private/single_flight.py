"""Single flight: concurrent calls with the same key share one execution.

The work runs in its own task, so a caller that is cancelled (e.g. its deadline passed) does not
cancel it for the others. Its result or exception goes to every caller; the entry is removed as
soon as the task ends, so a failure is shared once and the next call starts afresh. The map holds
at most one entry per distinct in-flight key (bounded by concurrent requests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """Deduplicate concurrent work by key."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[T]] = {}

    def __len__(self) -> int:
        return len(self._tasks)

    async def run(self, key: str, work: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """``(result, shared)``: ``shared`` is True when another call's execution was joined."""
        task = self._tasks.get(key)
        shared = task is not None
        if task is None:
            task = asyncio.ensure_future(work())
            self._tasks[key] = task

            def forget(t: asyncio.Task[T], k: str = key) -> None:
                self._forget(k, t)

            task.add_done_callback(forget)
        return await asyncio.shield(task), shared

    def _forget(self, key: str, task: asyncio.Task[T]) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled():
            task.exception()  # mark retrieved: every waiter may have gone away

    async def wait_idle(self) -> None:
        """Wait until no work is in flight (used by ``close``)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)
