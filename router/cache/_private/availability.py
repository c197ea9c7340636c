"""Fail-soft gate for a remote tier: down on failure, probe after a doubling backoff.

One alert event per outage (``<name>_unavailable``) and one when it returns
(``<name>_recovered``). While down, only one caller at a time is let through as the probe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

EventSink = Callable[[str, dict[str, Any]], None]


def emit_safely(sink: EventSink | None, kind: str, detail: dict[str, Any]) -> None:
    """Call ``sink``; a failing sink is logged and never breaks serving."""
    if sink is None:
        return
    try:
        sink(kind, detail)
    except Exception:
        log.exception("cache event callback failed for %s", kind)


class Availability:
    """Up/down state of one dependency. ``admit()`` before a call, then report the result."""

    def __init__(
        self,
        *,
        name: str,
        backoff_s: float,
        backoff_max_s: float,
        clock: Callable[[], float],
        on_event: EventSink | None,
    ) -> None:
        self._name = name
        self._backoff0 = backoff_s
        self._backoff_max = backoff_max_s
        self._clock = clock
        self._on_event = on_event
        self._up = True
        self._backoff = backoff_s
        self._retry_at = 0.0
        self._probing = False
        self._down_since = 0.0

    @property
    def up(self) -> bool:
        """True while the dependency is considered healthy."""
        return self._up

    def admit(self) -> bool:
        """May a call go out now? While down, lets one probe through once the backoff elapsed."""
        if self._up:
            return True
        if self._probing or self._clock() < self._retry_at:
            return False
        self._probing = True
        return True

    def succeeded(self) -> None:
        """Report a successful call."""
        if self._up:
            return
        self._up, self._probing = True, False
        self._backoff = self._backoff0
        emit_safely(
            self._on_event,
            f"{self._name}_recovered",
            {"down_for_s": round(self._clock() - self._down_since, 3)},
        )

    def failed(self, error: BaseException) -> None:
        """Report a failed call (error or timeout)."""
        now = self._clock()
        if self._up:
            self._up = False
            self._down_since = now
            self._backoff = self._backoff0
            self._retry_at = now + self._backoff
            emit_safely(
                self._on_event,
                f"{self._name}_unavailable",
                {"error": f"{type(error).__name__}: {error}", "retry_in_s": self._backoff},
            )
            return
        if self._probing:  # a failed probe doubles the wait, up to the bound
            self._probing = False
            self._backoff = min(self._backoff * 2, self._backoff_max)
            self._retry_at = now + self._backoff
