"""The status page: ``GET /ui`` on the app's HTTP port.

A small static page (HTML, JS, CSS shipped as package data; no build step, no CDN) that polls
``/v2/status`` every second and shows per device the resident models by bytes, the host tier,
queue depth per priority, swaps/s, preemptions/s and memory; per priority class the request
rate, p50 and p99 end to end, each device's queue wait against compute, and the shed and
refused counts; per model rate, p99, cache-hit and degraded shares and breaker state; firing
alerts; and small plots of swaps, queues, p99, and p99 per class.

Read-only. The page itself holds no data; ``/v2/status`` needs the operator key when one is set,
so the page asks for it and keeps it in the tab's ``sessionStorage`` only (sent as
``X-API-Key``). The Content-Security-Policy allows this origin only: nothing loads from
elsewhere.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

__all__ = ["ui_routes"]

_STATIC = files(__package__) / "static"
_TYPES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
          "style.css": "text/css; charset=utf-8"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> Response:
    body = (_STATIC / name).read_bytes()
    return Response(body, media_type=_TYPES[name], headers=_HEADERS)


def ui_routes() -> APIRouter:
    """``/ui`` (the page) and its two assets; any other name is a 404 from the app."""
    r = APIRouter(include_in_schema=False)

    @r.get("/ui")
    async def page() -> Response:
        return _asset("index.html")

    @r.get("/ui/app.js")
    async def script() -> Response:
        return _asset("app.js")

    @r.get("/ui/style.css")
    async def style() -> Response:
        return _asset("style.css")

    return r
