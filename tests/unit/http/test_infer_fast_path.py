"""The edge's direct infer endpoint (``router.http_infer``) answers exactly as the FastAPI route.

Two ASGI apps over the same real ingress: the one the ingress serves (the edge hands plain infer
POSTs to ``InferEndpoint``) and the same FastAPI app behind an edge without the endpoint. Every
request, good or bad, must get the same status, content type and body (timings aside), and the
served app must really take the direct path.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np
import pytest

from router.edge import mount_edge
from router.http import build_http_app
from router.http_infer import InferEndpoint

pytestmark = pytest.mark.asyncio(loop_scope="package")

BYPASS = {"cache_skip_read": True, "cache_skip_write": True}
PIXELS = np.linspace(-1, 1, 64).round(3).tolist()
TIMINGS = ("queue_ms", "compute_ms", "total_ms")


def doc(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                                     "data": PIXELS}], "parameters": dict(BYPASS)}
    d.update(over)
    return d


CASES: list[tuple[str, Any]] = [
    ("/v2/models/digits-small/infer", doc()),
    ("/v2/models/digits-small/infer", doc(id="req-7")),
    ("/v2/models/digits-small/versions/1/infer", doc()),
    ("/v2/models/digits-small/infer", doc(outputs=[{"name": "logits",
                                                    "parameters": {"binary_data": True}}])),
    ("/v2/models/digits-small/infer", doc(outputs=[{"name": "nope"}])),
    ("/v2/models/digits-small/infer", doc(parameters={**BYPASS, "priority": "realtime"})),
    ("/v2/models/digits-small/infer", doc(parameters={**BYPASS, "deadline_ms": "soon"})),
    ("/v2/models/digits-small/infer", doc(inputs=[{"name": "pixels", "shape": [1, 63],
                                                   "datatype": "FP32", "data": PIXELS[:63]}])),
    ("/v2/models/digits-small/infer", doc(inputs=[{"name": "pixels", "shape": [1, 64],
                                                   "datatype": "BYTES", "data": PIXELS}])),
    ("/v2/models/no-such-model/infer", doc()),
    ("/v2/models/digits-small/versions/99/infer", doc()),
    ("/v2/models/" + "m" * 300 + "/infer", doc()),
    ("/v2/models/digits-small/infer", b'{"inputs": [1, 2,'),
    ("/v2/models/digits-small/infer", b"[]"),
]


class CountingEndpoint(InferEndpoint):
    calls = 0

    async def respond(self, scope, name, version, body):
        type(self).calls += 1
        return await super().respond(scope, name, version, body)


def _strip(r: httpx.Response) -> tuple[int, str, Any]:
    ctype = r.headers.get("content-type", "")
    if ctype.startswith("application/octet-stream"):
        n = int(r.headers["inference-header-content-length"])
        head, tail = json.loads(r.content[:n]), r.content[n:]
    else:
        head, tail = r.json(), b""
    for k in TIMINGS:
        head.get("parameters", {}).pop(k, None)
    return r.status_code, ctype, (head, tail)


async def test_direct_endpoint_answers_as_the_fastapi_route(ingress):
    s = ingress.settings
    direct = mount_edge(build_http_app(ingress), settings=s.edge, max_body_bytes=s.max_body_bytes,
                        default_deadline_ms=s.default_deadline_ms,
                        infer=CountingEndpoint(ingress))
    routed = mount_edge(build_http_app(ingress), settings=s.edge, max_body_bytes=s.max_body_bytes,
                        default_deadline_ms=s.default_deadline_ms)
    clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://ts")
               for a in (direct, routed)]
    statuses = set()
    try:
        for path, body in CASES:
            kw = {"content": body} if isinstance(body, bytes) else {"json": body}
            a, b = [await c.post(path, **kw) for c in clients]
            assert _strip(a) == _strip(b), (path, a.text[:300], b.text[:300])
            statuses.add(a.status_code)
            assert "edge;dur=" in a.headers.get("server-timing", ""), path
    finally:
        for c in clients:
            await c.aclose()
    assert CountingEndpoint.calls == len(CASES)
    assert {200, 400, 404} <= statuses, statuses  # good and bad requests both compared


async def test_the_edge_in_front_of_fastapi_answers_the_same_and_admits_once(ingress):
    """``router.edge.outside`` (the listener's app): the same answers as the app it wraps, each
    infer request admitted by one edge only, and other routes passed through to FastAPI."""
    from router.edge import EdgeGate, outside

    s = ingress.settings
    gate = EdgeGate(s.edge)
    admitted = []
    started = gate.state.started
    gate.state.started = lambda p, now=None: (admitted.append(p), started(p, now))[1]
    inner = mount_edge(build_http_app(ingress), settings=s.edge, max_body_bytes=s.max_body_bytes,
                       default_deadline_ms=s.default_deadline_ms,
                       infer=InferEndpoint(ingress), gate=gate)
    outer = outside(inner)
    assert outer.gate is gate
    clients = [httpx.AsyncClient(transport=httpx.ASGITransport(app=a), base_url="http://ts")
               for a in (inner, outer)]
    try:
        for path, body in CASES:
            kw = {"content": body} if isinstance(body, bytes) else {"json": body}
            before = len(admitted)
            a = await clients[0].post(path, **kw)
            mid = len(admitted)
            b = await clients[1].post(path, **kw)
            assert _strip(a) == _strip(b), (path, a.text[:300], b.text[:300])
            assert len(admitted) - mid == mid - before, path  # the outer edge alone admitted
        # infer_stream is admitted by the edge, then answered by FastAPI's route: through the
        # outer edge it passes the inner one stamped, not admitted a second time
        before = len(admitted)
        a = await clients[0].post("/v2/models/digits-small/infer_stream", json=doc())
        mid = len(admitted)
        b = await clients[1].post("/v2/models/digits-small/infer_stream", json=doc())
        assert a.status_code == b.status_code == 200 and mid - before == 1
        assert len(admitted) - mid == 1
        r = await clients[1].get("/v2/health/ready")
        assert r.status_code == 200 and r.headers.get("content-type", "").startswith(
            "application/json")
    finally:
        for c in clients:
            await c.aclose()
    with pytest.raises(ValueError, match="mount_edge"):
        outside(build_http_app(ingress))
