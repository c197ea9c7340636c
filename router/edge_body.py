"""Cheap looks at a raw request body, for the edge: nesting depth and the priority/deadline.

Nothing here decodes JSON. :class:`DepthScanner` follows ``[``/``{`` nesting chunk by chunk as
the body arrives (numpy, so a 29 MB body costs a few hundred 0.2 ms steps spread over its
arrival, never one long stall of the event loop), ignoring brackets inside strings.
:func:`sniff_priority` and :func:`sniff_deadline_ms` read the ``parameters`` Timeshare's v2 body
carries with a bounded regex over the first and last :data:`SNIFF_BYTES` of the JSON part:
``parameters`` sits before or after ``inputs`` in the bodies clients write, and the value found
only decides shedding (the pipeline still validates the decoded value).
"""

from __future__ import annotations

import re

import numpy as np

from policies.priority import Priority, parse_priority

__all__ = ["SNIFF_BYTES", "DepthScanner", "sniff_deadline_ms", "sniff_priority"]

SNIFF_BYTES = 4096
_PRIORITY = re.compile(rb'"priority"\s*:\s*"?([A-Za-z0-9_]{1,16})')
_DEADLINE = re.compile(rb'"deadline_ms"\s*:\s*([0-9][0-9.eE+]{0,24})')
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))
_QUOTE, _BACKSLASH = ord('"'), ord("\\")


class DepthScanner:
    """Tracks JSON nesting depth across chunks; :meth:`feed` is False once over ``max_depth``."""

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.depth = 0
        self._in_string = False
        self._trailing_backslashes = 0  # run at the end of the last chunk (escapes a quote)

    def feed(self, chunk: bytes, *, last: bool = False) -> bool:
        """Scan one more chunk; False when the nesting went deeper than ``max_depth``.
        ``last``: no chunk follows (the scanner's state is not needed afterwards)."""
        if not chunk:
            return True
        if last and self.depth + chunk.count(b"[") + chunk.count(b"{") <= self.max_depth:
            # Every bracket counted, quoted or not, can only overcount the depth: a body with
            # few brackets (every ordinary v2 body) needs no scan. Two C-speed counts instead
            # of the numpy pass, which cost more than the rest of the edge for a small body.
            return True
        a = np.frombuffer(chunk, dtype=np.uint8)
        quotes = a == _QUOTE
        backslashes = a == _BACKSLASH
        if not self._in_string and not quotes.any() and not backslashes.any():
            return self._brackets(a, np.ones(a.shape, dtype=bool))
        n = a.shape[0]
        idx = np.arange(n, dtype=np.int64)
        last_plain = np.maximum.accumulate(np.where(backslashes, -1, idx))
        # backslashes directly before position i (a run may start in the previous chunk)
        run = np.empty(n, dtype=np.int64)
        run[0] = self._trailing_backslashes
        prev = last_plain[:-1]
        run[1:] = np.where(prev >= 0, idx[:-1] - prev, idx[:-1] + 1 + self._trailing_backslashes)
        real_quotes = quotes & (run % 2 == 0)
        toggles = np.cumsum(real_quotes, dtype=np.int64) + int(self._in_string)
        outside = (toggles % 2 == 0) & ~quotes
        ok = self._brackets(a, outside)
        self._in_string = bool(toggles[-1] % 2)
        tail = n - 1 - int(last_plain[-1])
        self._trailing_backslashes = (tail if last_plain[-1] >= 0
                                      else self._trailing_backslashes + n)
        return ok

    def _brackets(self, a: np.ndarray, outside: np.ndarray) -> bool:
        opens = ((a == _OPEN[0]) | (a == _OPEN[1])) & outside
        closes = ((a == _CLOSE[0]) | (a == _CLOSE[1])) & outside
        if not opens.any() and not closes.any():
            return True
        steps = opens.astype(np.int64) - closes.astype(np.int64)
        levels = np.cumsum(steps) + self.depth
        self.depth = int(levels[-1])
        return int(levels.max()) <= self.max_depth


def _windows(body: bytes) -> tuple[bytes, ...]:
    if len(body) <= 2 * SNIFF_BYTES:
        return (body,)
    return (body[:SNIFF_BYTES], body[-SNIFF_BYTES:])


def sniff_priority(body: bytes) -> Priority | None:
    """The ``"priority"`` parameter of a raw v2 body, if found in the bounded windows."""
    for window in _windows(body):
        m = _PRIORITY.search(window)
        if m:
            try:
                raw = m.group(1).decode()
                return parse_priority(int(raw) if raw.isascii() and raw.isdigit() else raw)
            except ValueError:
                return None  # the pipeline reports the bad value, naming the field
    return None


def sniff_deadline_ms(body: bytes) -> float | None:
    """The ``"deadline_ms"`` parameter of a raw v2 body, if found in the bounded windows."""
    for window in _windows(body):
        m = _DEADLINE.search(window)
        if m:
            try:
                value = float(m.group(1))
            except ValueError:
                return None
            return value if value > 0 else None
    return None
