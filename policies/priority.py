"""Priority classes shared by the scheduler, admission control and routing.

Lower numeric value = more urgent. The names are what callers send on the wire.
"""

from __future__ import annotations

import enum

__all__ = ["PRIORITIES", "Priority", "parse_priority"]


class Priority(enum.IntEnum):
    """Priority classes, most urgent first: realtime > interactive (default) > batch >
    background."""

    REALTIME = 0
    INTERACTIVE = 1
    BATCH = 2
    BACKGROUND = 3

    @property
    def label(self) -> str:
        return _LABELS[self._value_]  # on every request's path: no ``name`` property, no lower()

    @classmethod
    def default(cls) -> Priority:
        return cls.INTERACTIVE


_LABELS = tuple(p.name.lower() for p in Priority)
# Every class, most urgent first; iterating the tuple is ~5x cheaper than iterating the enum
# class, which request-path code does several times per request.
PRIORITIES: tuple[Priority, ...] = tuple(Priority)


def parse_priority(value: Priority | str | int | None) -> Priority:
    """Parse a wire value (``"realtime"``, ``0``, a Priority) into a Priority.

    Raises ``ValueError`` listing the valid names for anything else.
    """
    if value is None:
        return Priority.default()
    if isinstance(value, Priority):
        return value
    if isinstance(value, bool):
        raise ValueError(f"priority must be one of {_valid()}, got {value!r}")
    if isinstance(value, int):
        try:
            return Priority(value)
        except ValueError:
            raise ValueError(f"priority must be one of {_valid()} or 0..3, got {value!r}") from None
    if isinstance(value, str):
        try:
            return Priority[value.strip().upper()]
        except KeyError:
            raise ValueError(f"priority must be one of {_valid()}, got {value!r}") from None
    raise ValueError(f"priority must be one of {_valid()}, got {type(value).__name__}")


def _valid() -> str:
    return ", ".join(p.label for p in Priority)
