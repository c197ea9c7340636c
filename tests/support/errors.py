"""The app's error body, pinned exactly: status, ``type`` and ``field``.

``ERROR_TYPES`` is written out here by hand, not read from the app, so that a change to the
app's mapping (``fallbacks.errors``, ``router.http._STATUS_TYPES``) fails the tests.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ERROR_TYPES", "assert_error", "assert_error_body"]

# The ``type`` each status carries when the app's own errors produce it.
ERROR_TYPES: dict[int, str] = {
    400: "InvalidRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "ModelNotFound",
    405: "InvalidRequest",
    413: "PayloadTooLarge",
    429: "QuotaExceeded",
    500: "TimeshareError",
    503: "ServiceUnavailable",
    504: "DeadlineExceeded",
}


def assert_error_body(status: int, doc: Any, field: str | None, *, type_: str | None = None,
                      text: str = "") -> None:
    """``doc`` is the app's error body for ``status``: exactly {"error", "type"[, "field"]},
    a message, the ``type`` (``type_``, else the status's in ``ERROR_TYPES``) and exactly
    ``field`` (None: the body names no field)."""
    want = type_ or ERROR_TYPES[status]
    assert isinstance(doc, dict), text or doc
    keys = {"error", "type"} | ({"field"} if field is not None else set())
    assert set(doc) == keys, (status, doc)
    assert isinstance(doc["error"], str) and doc["error"], doc
    assert doc["type"] == want, (status, doc)
    assert doc.get("field") == field, doc


def assert_error(r: Any, status: int, field: str | None = None, *,
                 type_: str | None = None) -> None:
    """An httpx response carries the app's error for ``status``, naming exactly ``field``."""
    assert r.status_code == status, r.text
    assert_error_body(status, r.json(), field, type_=type_, text=r.text)
