"""The one way background tasks stop: cancel, then wait until they have finished."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None]) -> None:
    """Cancel every task (None entries are skipped) and wait for all to finish.

    A task's own exception is not re-raised: stopping is not where a background failure is
    reported (each loop logs its own). Waiting matters: a cancelled task that is not awaited
    may still run its ``finally`` after its owner closed what it uses.
    """
    live = [t for t in tasks if t is not None]
    for task in live:
        task.cancel()
    if live:
        await asyncio.gather(*live, return_exceptions=True)
