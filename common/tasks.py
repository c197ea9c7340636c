"""The one way background tasks stop: cancel, then wait until they have finished."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

__all__ = ["cancel_and_wait"]

log = logging.getLogger(__name__)


async def cancel_and_wait(tasks: Iterable[asyncio.Task | None], *, recancel_s: float = 0.1,
                          give_up_s: float = 10.0) -> None:
    """Cancel every task (None entries are skipped) and wait for all to finish.

    A task's own exception is not re-raised: stopping is not where a background failure is
    reported (each loop logs its own). Waiting matters: a cancelled task that is not awaited
    may still run its ``finally`` after its owner closed what it uses.

    A cancel can be swallowed: a library under the task's await may turn it into its own error,
    which the loop catches and carries on (the alerter's Redis save did; CI hung in stop()).
    So a task still running ``recancel_s`` after its cancel is cancelled again, and again,
    until it ends; after ``give_up_s`` it is left running, with a warning naming it, rather
    than hang its owner's shutdown.
    """
    live = {t for t in tasks if t is not None}
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + give_up_s
    while live:
        for task in live:
            task.cancel()
        done, pending = await asyncio.wait(live, timeout=recancel_s)
        for task in done:  # retrieved, so asyncio does not log "exception never retrieved"
            if not task.cancelled():
                task.exception()
        live = pending
        if live and loop.time() >= give_up_at:
            log.warning("tasks still running %.1f s after their cancel, left behind: %s",
                        give_up_s, ", ".join(sorted(t.get_name() for t in live)))
            return
