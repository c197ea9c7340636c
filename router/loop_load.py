"""How busy the event loop's thread is: the edge's measure of its own CPU saturation.

A task on the loop wakes every ``interval_s`` and compares the loop thread's CPU time
(``time.thread_time``) with the wall time since its last wake-up. :attr:`busy` is an
exponentially weighted moving average of that share: about 0 on an idle loop, and near 1 once
the thread never waits for I/O, i.e. the ingress's own CPU is what limits it.

A loop's timer lateness does not show this. Under overload, a request's many short steps
interleave with every other request's, so each pass over the ready work stays short (0-4 ms
measured at 1.2x capacity), while each request waits behind all the others (p99 over 150 ms).

Time the thread spends waiting for a core that another process holds counts as neither, so on a
contended machine ``busy`` reads low. Its only use, the edge's choice between a fallback answer
and a 503, then errs towards the fallback, as before this measure existed.

The task runs only while the owner keeps calling :meth:`touch` (once per request). It ends by
itself after ``idle_s`` without a touch, so an idle replica has no timer firing. It starts again
on the next touch, and :attr:`busy` reads 0 until then.
"""

from __future__ import annotations

import asyncio
import time

from policies.estimates import ewma

__all__ = ["LoopLoad"]


class LoopLoad:
    """The running loop thread's busy share (see the module doc). Use it on that loop only."""

    def __init__(self, *, interval_s: float = 0.01, idle_s: float = 1.0) -> None:
        if not (interval_s > 0 and idle_s > 0):
            raise ValueError(f"interval_s and idle_s must be > 0, got {interval_s}, {idle_s}")
        self.interval_s = interval_s
        self.idle_s = idle_s
        self.busy = 0.0
        self._touched = 0.0
        self._task: asyncio.Task | None = None

    def touch(self) -> None:
        """Note one request; starts the measuring task when it is not running."""
        self._touched = time.monotonic()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def _watch(self) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        while time.monotonic() - self._touched < self.idle_s:
            await asyncio.sleep(self.interval_s)
            now_wall, now_cpu = time.perf_counter(), time.thread_time()
            share = (now_cpu - cpu) / max(now_wall - wall, 1e-9)
            self.busy = ewma(self.busy, min(max(share, 0.0), 1.0))
            wall, cpu = now_wall, now_cpu
        self.busy = 0.0  # nothing measured from here on: no stale verdict on the next request

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
