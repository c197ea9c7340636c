"""Deadlines and per-hop budgets.

A :class:`Deadline` is an absolute instant on an injected monotonic clock. Every hop asks it for
its budget (``remaining()`` minus a margin kept back for the fallback steps that may still have
to run), so the degraded answer can still be produced before the caller gives up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from common.clock import Clock

__all__ = ["Deadline", "resolve_deadline_ms"]



def resolve_deadline_ms(
    *, request_ms: float | None, model_ms: float | None, app_default_ms: float
) -> float:
    """Pick the deadline of a request: request ``deadline_ms`` → model config → app default.

    >>> resolve_deadline_ms(request_ms=None, model_ms=250.0, app_default_ms=1000.0)
    250.0

    Raises ``ValueError`` naming the field when the chosen value is not positive.
    """
    for name, value in (
        ("deadline_ms", request_ms),
        ("model.deadline_ms", model_ms),
        ("app_default_deadline_ms", app_default_ms),
    ):
        if value is None:
            continue
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")
        return float(value)
    raise ValueError("app_default_deadline_ms must be set")  # unreachable with a float default


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class Deadline:
    """An absolute deadline ``at`` (seconds on ``clock``).

    >>> now = [10.0]
    >>> d = Deadline.after_ms(100, clock=lambda: now[0])
    >>> d.remaining()
    0.1
    >>> d.budget(margin_s=0.03)  # what a hop may spend, keeping 30 ms for the fallback
    0.07
    """

    at: float
    clock: Clock = field(default=time.monotonic, compare=False, repr=False)

    @classmethod
    def after_ms(cls, ms: float, *, clock: Clock = time.monotonic) -> Deadline:
        """A deadline ``ms`` milliseconds from now."""
        if not ms > 0:
            raise ValueError(f"deadline_ms must be > 0, got {ms!r}")
        return cls(at=clock() + ms / 1000.0, clock=clock)

    @classmethod
    def for_request(
        cls,
        *,
        request_ms: float | None,
        model_ms: float | None,
        app_default_ms: float,
        clock: Clock = time.monotonic,
        arrival_s: float | None = None,
    ) -> Deadline:
        """The deadline of a request, resolved as in :func:`resolve_deadline_ms`, counted from
        ``arrival_s`` (on ``clock``) when given, else from now."""
        ms = resolve_deadline_ms(
            request_ms=request_ms, model_ms=model_ms, app_default_ms=app_default_ms
        )
        start = clock() if arrival_s is None else arrival_s
        return cls(at=start + ms / 1000.0, clock=clock)

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, round(self.at - self.clock(), 9))

    def remaining_ms(self) -> float:
        """Milliseconds left, never negative."""
        return self.remaining() * 1000.0

    def expired(self) -> bool:
        """True once the deadline has been reached."""
        return self.clock() >= self.at

    def budget(self, *, margin_s: float = 0.0) -> float:
        """Seconds a hop may spend: ``remaining() - margin_s``, never negative."""
        if margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {margin_s!r}")
        return max(0.0, round(self.remaining() - margin_s, 9))

    def child(self, *, margin_s: float = 0.0, cap_s: float | None = None) -> Deadline:
        """The deadline handed to a hop: ``budget(margin_s)`` from now, at most ``cap_s``.

        Never later than this deadline and never in the past.
        """
        b = self.budget(margin_s=margin_s)
        if cap_s is not None:
            b = min(b, max(0.0, cap_s))
        return Deadline(at=self.clock() + b, clock=self.clock)
