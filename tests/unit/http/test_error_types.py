"""Every error class, pinned exactly through the HTTP app: status, ``type`` and ``field``.

A frontend (the real ``Frontend`` interface) raises each of the app's errors from the metadata
route; the expected status and ``type`` are written out here by hand (tests/support/errors.py),
so that collapsing the types in ``fallbacks.errors`` or remapping statuses in ``router.http``
fails these tests.
"""

from __future__ import annotations

import pickle
from typing import Any

import httpx
import pytest

import fallbacks.errors as errors_module
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
from router.frontend import Frontend
from router.http import build_http_app
from tests.support.errors import ERROR_TYPES, assert_error, assert_error_body

# (class, its status): the type each carries is its own name, ERROR_TYPES[status] for all but
# the base class.
CLASSES = [(InvalidRequest, 400), (Unauthorized, 401), (Forbidden, 403), (ModelNotFound, 404),
           (PayloadTooLarge, 413), (QuotaExceeded, 429), (ServiceUnavailable, 503),
           (Overloaded, 503), (DeadlineExceeded, 504), (TimeshareError, 500)]
# A 503 that says why: turned away at admission (the HTTP edge's own 503 carries this type too)
SUBTYPES = {Overloaded}


def test_the_list_covers_every_public_error() -> None:
    public = {getattr(errors_module, n) for n in errors_module.__all__}
    assert public == {cls for cls, _ in CLASSES}


@pytest.mark.parametrize("cls, status", CLASSES)
@pytest.mark.parametrize("field", [None, "inputs.pixels"])
def test_each_error_has_its_status_type_and_field(cls, status, field) -> None:
    e = cls("it went wrong", field=field)
    assert e.status_code == status
    assert_error_body(status, e.to_dict(), field, type_=cls.__name__)
    assert cls.__name__ == ERROR_TYPES[status] or cls is TimeshareError or cls in SUBTYPES
    back = pickle.loads(pickle.dumps(e))  # errors cross Ray handles
    assert type(back) is cls and back.to_dict() == e.to_dict()


def test_overloaded_keeps_its_retry_hint_across_a_handle() -> None:
    e = Overloaded("overload:batch: predicted queue delay 90 ms; retry later", field="priority",
                   retry_after_s=3)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is Overloaded and isinstance(back, ServiceUnavailable)
    assert (back.retry_after_s, back.field, back.cause, back.status_code) == (
        3, "priority", "shed", 503)


class RaisingFrontend(Frontend):
    """A frontend whose metadata route raises ``error``; ``status`` raises a plain bug."""

    api_key = None
    max_body_bytes = 1 << 20

    def __init__(self) -> None:
        self.error: BaseException = RuntimeError("unset")

    async def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        raise self.error

    async def status(self) -> dict[str, Any]:
        raise RuntimeError("a bug")


@pytest.fixture
async def raising():
    front = RaisingFrontend()
    transport = httpx.ASGITransport(app=build_http_app(front), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://timeshare") as c:
        yield front, c


@pytest.mark.parametrize("cls, status", CLASSES)
async def test_each_error_reaches_the_client_as_its_status_type_and_field(raising, cls,
                                                                          status) -> None:
    front, client = raising
    front.error = cls("it went wrong", field="version")
    assert_error(await client.get("/v2/models/m"), status, "version", type_=cls.__name__)
    front.error = cls("it went wrong")
    assert_error(await client.get("/v2/models/m"), status, None, type_=cls.__name__)


async def test_framework_errors_use_the_app_types(raising) -> None:
    _, client = raising
    assert_error(await client.get("/no/such/path"), 404, "path")  # ModelNotFound
    assert_error(await client.delete("/v2/models/m"), 405, None)  # InvalidRequest
    assert_error(await client.get("/v2/status"), 500, None)  # a bug: TimeshareError
