"""The open-loop engine of one generator process: a schedule, a bounded set of lanes, a clock.

A *lane* carries one request at a time: an HTTP keep-alive connection (``HttpLane``) or a slot
running ``Target.send`` as a task (``TaskLane``, e.g. a Ray handle call). The engine:

- at each planned time hands the request to an idle lane, or queues it (FIFO) when every lane is
  busy. The queue wait is the server's backpressure, so it is part of the request's latency,
  which always runs from the PLANNED send time;
- records its own lateness separately (``lag``: when it acted minus the planned time). That is
  the tool's fault, not the server's, and is what "the generator fell behind" is judged on;
- never lets a request vanish: every request ends answered, failed, refused
  (``generator_overload`` past ``max_in_flight``) or timed out ``timeout_s`` after its planned
  time, including requests still queued or in flight when the schedule ends.

The hot path creates no task or future per HTTP request; it is a list pop and a socket write.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from deploy.loadtest.target import LoadRequest, Outcome, Target

__all__ = [
    "Lane", "OpenLoop", "Records", "RunProgress", "TaskLane", "request_realtime", "run_fast",
]

T = TypeVar("T")

Clock = Callable[[], float]
# A lane's result: an ``Outcome``, or a raw ``(status, error, body)`` parsed after the run.
Result = Any
Finish = Callable[[Any, Result], None]

# How often expired requests are looked for; a timeout is reported at most this late.
_SWEEP_S = 0.02
# Measured on a busy 2-core host (1,000 sends/s): 0.3 ms leaves 14% of wake-ups early (waited
# out, ~0.1 ms each) for a lag p99 of ~0.9 ms; 0 leaves half early and costs 4x the CPU.
_UVLOOP_BIAS_S = 0.0003
_RT_PRIORITY = 10


class Lane(Protocol):
    """One request at a time. ``busy``, ``tag`` (the engine's index) and ``sent_at`` are read by
    the engine."""

    busy: bool
    tag: Any
    sent_at: float

    def start(self, tag: Any, data: Any, now: float) -> None: ...

    def abort(self) -> None: ...


@dataclass(slots=True)
class RunProgress:
    """Live counters of one run, read by the progress bar."""

    total: int
    sent: int = 0
    done: int = 0
    errors: int = 0
    in_flight: int = 0
    last_lag_s: float = 0.0
    started_at: float = 0.0
    scheduling: str = "normal"   # the generator processes' CPU scheduling policy


@dataclass(slots=True)
class Records:
    """Per request (engine index): times relative to its planned send, and its result."""

    lag: list[float]
    sent: list[float]
    done: list[float]
    result: list[Result]
    behind_since: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls, n: int) -> Records:
        nan = math.nan
        return cls([nan] * n, [nan] * n, [nan] * n, [None] * n)


class TaskLane:
    """A lane running ``target.send(request)`` as a task (handle or in-process targets)."""

    def __init__(self, target: Target, finish: Finish) -> None:
        self._target = target
        self._finish = finish
        self.busy = False
        self.tag: Any = None
        self.sent_at = 0.0
        self._task: asyncio.Task[Outcome] | None = None

    def start(self, tag: Any, data: LoadRequest, now: float) -> None:
        self.busy, self.tag, self.sent_at = True, tag, now
        self._task = asyncio.get_running_loop().create_task(self._target.send(data))
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[Outcome]) -> None:
        if task.cancelled() or not self.busy or task is not self._task:
            return
        exc = task.exception()
        self.busy = False
        self._finish(self, Outcome(error=type(exc).__name__) if exc else task.result())

    def abort(self) -> None:
        self.busy = False
        if self._task is not None:
            self._task.cancel()


class OpenLoop:
    """Send ``data[k]`` at ``t0 + offsets[k]`` over ``lanes``; see the module docstring."""

    def __init__(self, offsets: Sequence[float], data: Sequence[Any],
                 make_lane: Callable[[Finish], Lane], lanes: int, *, timeout_s: float,
                 max_in_flight: int, clock: Clock = time.perf_counter,
                 progress: RunProgress | None = None) -> None:
        if len(offsets) != len(data):
            raise ValueError(f"offsets and data differ in length: {len(offsets)} != {len(data)}")
        self._off = list(offsets)
        self._data = data
        self._timeout = timeout_s
        self._max = max_in_flight
        self._clock = clock
        self.lanes: list[Lane] = [make_lane(self._finish) for _ in range(lanes)]
        self._idle: list[Lane] = list(self.lanes)
        self._waiting: deque[int] = deque()
        # Requests handed to a lane, in start order, which is planned order (a lane takes from
        # the FIFO queue before going idle), so expiry only ever looks at the left end.
        self._started: deque[int] = deque()
        self._lane_of: list[Lane | None] = [None] * len(offsets)
        self._due = [0.0] * len(offsets)
        self.rec = Records.empty(len(offsets))
        self._left = len(offsets)
        self._all_done = asyncio.Event()
        self.progress = progress or RunProgress(total=len(offsets))

    async def run(self, t0: float) -> Records:
        """Run the whole schedule from ``t0`` (a ``clock()`` time) until every request ended."""
        self.progress.started_at = t0
        if self._left == 0:
            return self.rec
        sweeper = asyncio.get_running_loop().create_task(self._sweep())
        try:
            await self._schedule(t0)
            await self._all_done.wait()
        finally:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        return self.rec

    async def _schedule(self, t0: float) -> None:
        clock, due, prog = self._clock, self._due, self.progress
        # libuv's timers count whole milliseconds of a cached clock and fire up to ~1 ms early;
        # a request must never go out before its plan, so on uvloop the sleep aims a little
        # late and the rest (rarely needed) is waited out exactly. The stdlib loop's timers
        # never fire early.
        bias = _UVLOOP_BIAS_S if type(asyncio.get_running_loop()).__module__.startswith(
            "uvloop") else 0.0
        for k, off in enumerate(self._off):
            d = t0 + off
            due[k] = d
            now = clock()
            if d > now:
                await asyncio.sleep(d - now + bias)
                now = clock()
                while now < d:
                    now = clock()
            lag = now - d
            self.rec.lag[k] = lag
            prog.sent += 1
            prog.last_lag_s = lag
            self._dispatch(k, now)

    def _dispatch(self, k: int, now: float) -> None:
        if self._idle:
            self.progress.in_flight += 1
            self._start(self._idle.pop(), k, now)
        elif len(self._waiting) + len(self.lanes) >= self._max:
            self._record(k, now, now, Outcome(error="generator_overload"))
        else:
            self.progress.in_flight += 1
            self._waiting.append(k)

    def _start(self, lane: Lane, k: int, now: float) -> None:
        self._started.append(k)
        self._lane_of[k] = lane
        lane.start(k, self._data[k], now)

    def _finish(self, lane: Lane, result: Result) -> None:
        now = self._clock()
        self.progress.in_flight -= 1
        self._record(lane.tag, lane.sent_at, now, result)
        self._next(lane, now)

    def _next(self, lane: Lane, now: float) -> None:
        if self._waiting:
            self._start(lane, self._waiting.popleft(), now)
        else:
            self._idle.append(lane)

    def _record(self, k: int, sent: float, done: float, result: Result) -> None:
        d = self._due[k]
        rec = self.rec
        rec.sent[k] = sent - d
        rec.done[k] = done - d
        rec.result[k] = result
        prog = self.progress
        prog.done += 1
        if not (isinstance(result, Outcome) and result.ok) and not (
                isinstance(result, tuple) and result[1] is None):
            prog.errors += 1
        self._left -= 1
        if self._left == 0:
            self._all_done.set()

    async def _sweep(self) -> None:
        """Expire requests ``timeout_s`` after their planned time, queued or in flight."""
        due, rec, prog = self._due, self.rec, self.progress
        while True:
            await asyncio.sleep(_SWEEP_S)
            now = self._clock()
            limit = now - self._timeout
            while self._waiting and due[self._waiting[0]] <= limit:
                k = self._waiting.popleft()
                prog.in_flight -= 1
                # Never sent: its "sent" time is its expiry, so service time reads 0.
                self._record(k, now, now, Outcome(error="Timeout"))
            started = self._started
            while started and due[started[0]] <= limit:
                k = started.popleft()
                lane = self._lane_of[k]
                self._lane_of[k] = None
                if rec.result[k] is not None or lane is None:
                    continue
                sent = lane.sent_at
                lane.abort()
                prog.in_flight -= 1
                self._record(k, sent, now, Outcome(error="Timeout"))
                self._next(lane, now)


def request_realtime() -> str:
    """Ask for SCHED_FIFO (lowest real-time priority) for the calling thread: a sleeping
    generator then wakes on time even when the machine is busy, instead of waiting behind other
    processes' slices (measured on a busy 2-core host: wake-up lateness p99 5-13 ms normal,
    0.7 ms SCHED_FIFO). The engine never spins, so it only takes the CPU it needs. Returns the
    policy in force: ``"SCHED_FIFO"``, or ``"normal"`` when refused (no privilege)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(_RT_PRIORITY))
    except (AttributeError, OSError):
        return "normal"
    return "SCHED_FIFO"


def run_fast(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when it is installed (less CPU per socket event)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
