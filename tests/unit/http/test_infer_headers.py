"""The infer endpoint's one-pass header read answers as Starlette's Headers would."""

import pytest
from starlette.datastructures import Headers

from router.http_infer import header_length, infer_headers, presented_key

CASES = [
    [],
    [(b"content-type", b"application/json")],
    [(b"authorization", b"Bearer k1"), (b"x-api-key", b"k2")],
    [(b"x-api-key", b"k2"), (b"x-api-key", b"k3")],  # the first of a repeated header
    [(b"authorization", b"Basic abc"), (b"x-api-key", b"k2")],
    [(b"authorization", b"bearer low")],
    [(b"inference-header-content-length", b"12"), (b"inference-header-content-length", b"3")],
    [(b"Authorization", b"Bearer raw-case")],  # not lowercased by the server: neither reads it
]


@pytest.mark.parametrize("raw", CASES)
def test_same_answers_as_starlette_headers(raw):
    scope = {"type": "http", "headers": raw}
    fast, slow = infer_headers(scope), Headers(scope=scope)
    assert presented_key(fast) == presented_key(slow)
    assert header_length(fast, stream=False) == header_length(slow, stream=False)
