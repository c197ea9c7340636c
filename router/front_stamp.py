"""The time a request waited in front of Timeshare, from a front proxy's ``X-Request-Start``.

Behind a load balancer or Ray Serve's proxy, a request may queue before the edge sees it, and
that wait is off the edge's clock: an answer in time by the edge's clock can be late by the
caller's. Front proxies commonly stamp when they received the request (nginx's
``proxy_set_header X-Request-Start "t=${msec}"``; Heroku's router; the convention application
monitors read as "request queue time"). The edge reads that stamp and starts the request's
deadline there, so the time in front counts against the deadline: a request that can no longer
make it is shed at once rather than run late, and the device's time goes to one that can.

Accepted forms: ``t=<number>`` or ``<number>``, the Unix time in seconds (with a fraction),
milliseconds, microseconds or nanoseconds, told apart by magnitude. The stamp is the front's
wall clock against this host's, so the two must be synchronised (NTP); a stamp from the future
(a clock behind) counts as no wait. A stamp that does not parse, or is older than the
``max_age_s`` the operator allows (a wrong unit, a broken clock), is ignored: it comes from the
infrastructure, not the caller, and is never a reason to refuse a request. A caller who sets it
can only shorten its own deadline, never lengthen it.
"""

from __future__ import annotations

__all__ = ["HEADER", "front_wait_s", "stamp_s"]

HEADER = b"x-request-start"

# Unix time now is about 1.8e9 s: a stamp past these bounds is in ms, µs or ns
_UNITS = ((1e17, 1e9), (1e14, 1e6), (1e11, 1e3))


def stamp_s(raw: str) -> float | None:
    """The stamp's Unix time in seconds, or None when it does not parse.

    >>> stamp_s("t=1764380000123")
    1764380000.123
    >>> stamp_s("1764380000.5"), stamp_s("t=soon")
    (1764380000.5, None)
    """
    text = raw.strip()
    if text.startswith("t="):
        text = text[2:]
    try:
        value = float(text)
    except ValueError:
        return None
    if not value > 0 or value == float("inf"):
        return None
    for bound, per_second in _UNITS:
        if value >= bound:
            return value / per_second
    return value


def front_wait_s(raw: str, *, now_s: float, max_age_s: float) -> float | None:
    """How long the request waited in front of the edge by the stamp ``raw``, at Unix time
    ``now_s``: 0 for a stamp in the future, None for one that does not parse or is older than
    ``max_age_s`` (ignored).

    >>> front_wait_s("t=99.75", now_s=100.0, max_age_s=30.0)
    0.25
    >>> front_wait_s("t=100.5", now_s=100.0, max_age_s=30.0), front_wait_s(
    ...     "t=10", now_s=100.0, max_age_s=30.0)
    (0.0, None)
    """
    at = stamp_s(raw)
    if at is None:
        return None
    wait = now_s - at
    if wait > max_age_s:
        return None
    return max(wait, 0.0)
