"""Typed errors of the public API (``router.errors`` re-exports them).

They live here, in the lowest package that raises them, so that ``fallbacks`` never imports
``router`` (no import runs back up the layers).

Each error carries the HTTP status it maps to and, where it applies, the request field at fault,
so the HTTP layer and the handle client report the same thing. All are picklable (they cross Ray
handles); the client helper unwraps Ray's wrapper and re-raises these.
"""

from __future__ import annotations

__all__ = [
    "TimeshareError",
    "InvalidRequest",
    "ModelNotFound",
    "PayloadTooLarge",
    "Unauthorized",
    "Forbidden",
    "QuotaExceeded",
    "ServiceUnavailable",
    "Overloaded",
    "DeadlineExceeded",
]


class TimeshareError(Exception):
    """Base class: ``status_code`` is the HTTP status, ``field`` the offending field if any,
    ``cause`` why no answer could be produced where that is a load decision: ``"shed"``
    (admission turned the request away) or ``"refused"`` (a pool refused it unrun); the status
    views count them per priority class."""

    status_code: int = 500

    def __init__(self, message: str, *, field: str | None = None,
                 cause: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.cause = cause

    def __reduce__(self):  # keyword-only args need an explicit pickle recipe
        return (_rebuild, (type(self), self.message, self.field, self.cause))

    def to_dict(self) -> dict:
        body: dict = {"error": self.message, "type": type(self).__name__}
        if self.field is not None:
            body["field"] = self.field
        return body


def _rebuild(cls: type[TimeshareError], message: str, field: str | None,
             cause: str | None = None) -> TimeshareError:
    return cls(message, field=field, cause=cause)


class InvalidRequest(TimeshareError):
    """Malformed or mismatched input (HTTP 400)."""

    status_code = 400


class ModelNotFound(TimeshareError):
    """Unknown model, route or version (HTTP 404)."""

    status_code = 404


class PayloadTooLarge(TimeshareError):
    """Request body or tensor over the configured size (HTTP 413)."""

    status_code = 413


class Unauthorized(TimeshareError):
    """Missing or wrong API key on a protected endpoint (HTTP 401)."""

    status_code = 401


class Forbidden(TimeshareError):
    """The caller key is valid but does not allow this (a declared caller it is not) (HTTP 403)."""

    status_code = 403


class QuotaExceeded(TimeshareError):
    """The caller is over its concurrency or rate limit (HTTP 429)."""

    status_code = 429


class ServiceUnavailable(TimeshareError):
    """No answer could be produced and no fallback applies (HTTP 503)."""

    status_code = 503


class Overloaded(ServiceUnavailable):
    """Turned away at admission (HTTP 503 with ``Retry-After``): ``retry_after_s`` is the whole
    seconds after which a retry may find room."""

    def __init__(self, message: str, *, field: str | None = None,
                 cause: str | None = "shed", retry_after_s: int = 1) -> None:
        super().__init__(message, field=field, cause=cause)
        self.retry_after_s = retry_after_s

    def __reduce__(self):
        return (_rebuild_overloaded, (self.message, self.field, self.cause, self.retry_after_s))


def _rebuild_overloaded(message: str, field: str | None, cause: str | None,
                        retry_after_s: int) -> Overloaded:
    return Overloaded(message, field=field, cause=cause, retry_after_s=retry_after_s)


class DeadlineExceeded(TimeshareError):
    """The deadline passed and the model's fallback chain is empty (HTTP 504)."""

    status_code = 504
