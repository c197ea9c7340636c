"""Typed errors of the public API: defined in :mod:`fallbacks.errors`, re-exported here."""

from fallbacks.errors import (
    DeadlineExceeded,
    Forbidden,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PayloadTooLarge,
    QuotaExceeded,
    ServiceUnavailable,
    TimeshareError,
    Unauthorized,
)

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
