"""``async with timeouts.after(seconds):``: ``asyncio.timeout`` with one loop timer shared by every
scope that expires in the same millisecond.

Every remote step of the fallback chain runs under a timeout. ``asyncio.timeout`` schedules one
loop timer per call and cancels it when the call answers: 4 µs a request on a quiet core, more
in the ingress under load (docs/PERFORMANCE.md, fourteenth session). Here a scope joins the
timer of its millisecond, creating it only if it is the first there, and leaving costs a set
removal; a timer whose scopes have all left fires once and does nothing. uvloop's timers count
whole milliseconds anyway, so rounding the expiry up to the next millisecond loses no precision;
a scope never expires early.

The semantics are ``asyncio.timeout``'s (Python 3.11): on expiry the task is cancelled, and the
``CancelledError`` leaving the block becomes ``TimeoutError`` unless someone else also cancelled
the task, in which case the cancellation propagates.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

__all__ = ["SharedTimeouts"]

_NEW, _ENTERED, _EXPIRING, _EXPIRED, _EXITED = range(5)


class SharedTimeouts:
    """Timeout scopes for one event loop (a new loop starts afresh); ``resolution_s``: the
    width of one shared timer's slot."""

    def __init__(self, *, resolution_s: float = 0.001) -> None:
        if not resolution_s > 0:
            raise ValueError(f"resolution_s must be > 0, got {resolution_s}")
        self.resolution_s = resolution_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: dict[int, set[_Scope]] = {}

    def after(self, delay_s: float) -> _Scope:
        """A scope that times out ``delay_s`` seconds after it is entered."""
        return _Scope(self, delay_s)

    @property
    def pending_slots(self) -> int:
        """Timers scheduled and not yet fired (bounded by the longest delay in slots)."""
        return len(self._slots)

    def _join(self, scope: _Scope, loop: asyncio.AbstractEventLoop) -> set[_Scope]:
        if loop is not self._loop:  # a new loop: the old loop's timers will never fire here
            self._loop, self._slots = loop, {}
        slot = math.ceil((loop.time() + scope.delay_s) / self.resolution_s)
        members = self._slots.get(slot)
        if members is None:
            members = self._slots[slot] = set()
            loop.call_at(slot * self.resolution_s, self._fire, slot, loop)
        members.add(scope)
        return members

    def _fire(self, slot: int, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:
            return
        for scope in self._slots.pop(slot, ()):
            scope._expire()


class _Scope:
    __slots__ = ("_cancelling", "_members", "_owner", "_state", "_task", "delay_s")

    def __init__(self, owner: SharedTimeouts, delay_s: float) -> None:
        self._owner = owner
        self.delay_s = delay_s
        self._state = _NEW
        self._task: asyncio.Task | None = None
        self._members: set[_Scope] | None = None
        self._cancelling = 0

    def expired(self) -> bool:
        """Did this scope time out (as ``asyncio.Timeout.expired``)?"""
        return self._state in (_EXPIRING, _EXPIRED)

    async def __aenter__(self) -> _Scope:
        if self._state != _NEW:
            raise RuntimeError("a timeout scope is entered once")
        loop = asyncio.get_running_loop()  # read once: current_task would read it again
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a timeout should be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._state = _ENTERED
        self._members = self._owner._join(self, loop)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._members is not None:
            self._members.discard(self)
            self._members = None
        if self._state == _EXPIRING:
            self._state = _EXPIRED
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc
        elif self._state == _ENTERED:
            self._state = _EXITED

    def _expire(self) -> None:
        if self._state != _ENTERED:
            return
        self._state = _EXPIRING
        self._members = None
        assert self._task is not None
        self._task.cancel()
