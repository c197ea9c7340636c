"""A minimal HTTP/1.1 keep-alive client on raw asyncio protocols, for the generator's hot path.

Why not httpx: on a small machine it costs milliseconds of CPU per request, which is then
measured as the server's latency. Here a request is one pre-encoded ``bytes`` written to an open
connection, and the answer is parsed by ``Content-Length`` (or chunked) in ``data_received``; no
task, no future, no header objects per request.

One ``HttpLane`` is one connection that carries one request at a time. A lane whose connection
closed (server keep-alive expiry, ``Connection: close``, a timeout abort) reconnects lazily on its
next request, and that connect time is part of that request's latency.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from urllib.parse import urlsplit

from deploy.loadtest.target import LoadRequest, Outcome, v2_inputs, v2_params

__all__ = ["BodyEncoder", "Finish", "HttpLane", "encode_request", "outcome_of", "split_url"]

# finish(lane, (status, error, body)): status is the HTTP status (0 on a transport failure),
# error a short class name or None.
Finish = Callable[["HttpLane", tuple[int, str | None, bytes]], None]

_CRLF2 = b"\r\n\r\n"


def split_url(url: str) -> tuple[str, int, str]:
    """(host, port, base path) of an ``http://`` URL; https is not supported on the fast path."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"target.url: the load generator speaks plain http, got {url!r}")
    return parts.hostname or "127.0.0.1", parts.port or 80, parts.path.rstrip("/")


class BodyEncoder:
    """Encodes KServe v2 request bytes; the inputs' JSON is cached per payload object, so a
    plan of thousands of requests over a pool of 64 payloads serialises 64 tensors, not 1000s."""

    def __init__(self, host: str, port: int, base_path: str) -> None:
        self._host = f"{host}:{port}".encode()
        self._base = base_path
        self._inputs: dict[int, bytes] = {}

    def encode(self, req: LoadRequest) -> bytes:
        key = id(req.inputs)
        inputs = self._inputs.get(key)
        if inputs is None:
            inputs = json.dumps(v2_inputs(req)).encode()
            self._inputs[key] = inputs
        payload = (b'{"id": ' + json.dumps(req.request_id).encode() + b', "inputs": ' + inputs
                   + b', "parameters": ' + json.dumps(v2_params(req)).encode() + b"}")
        version = f"/versions/{req.version}" if req.version else ""
        path = f"{self._base}/v2/models/{req.model}{version}/infer".encode()
        return (b"POST " + path + b" HTTP/1.1\r\nHost: " + self._host
                + b"\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(payload)).encode() + _CRLF2 + payload)


def encode_request(url: str, req: LoadRequest) -> bytes:
    """The full HTTP/1.1 request bytes of one ``LoadRequest`` (uncached; for one-off use)."""
    host, port, base = split_url(url)
    return BodyEncoder(host, port, base).encode(req)


class _Conn(asyncio.Protocol):
    """One TCP connection of a lane; callbacks of a connection the lane dropped are ignored."""

    def __init__(self, lane: HttpLane) -> None:
        self.lane = lane
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment] # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.lane.conn is self:
            self.lane.data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lane.conn is self:
            self.lane.connection_lost()


class HttpLane:
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, host: str, port: int, finish: Finish) -> None:
        self.host, self.port = host, port
        self._finish = finish
        self.conn: _Conn | None = None
        self.busy = False
        self.tag: object = None          # the owner's id of the request in flight
        self.sent_at = 0.0               # clock() when the request was handed to this lane
        self._buf = bytearray()
        self._pending: bytes | None = None
        self._connecting = False

    async def connect(self) -> None:
        """Open the connection now (pre-opening before a run)."""
        conn = _Conn(self)
        await asyncio.get_running_loop().create_connection(lambda: conn, self.host, self.port)
        self.conn = conn

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and conn.transport is not None:
            conn.transport.abort()

    def abort(self) -> None:
        """Give up on the request in flight (timeout). The connection is dropped, since its
        answer may still arrive; the next request reconnects."""
        self.busy = False
        self._pending = None
        self._drop()

    def close(self) -> None:
        """Close the connection (end of run)."""
        self._drop()

    def start(self, tag: object, data: bytes, now: float) -> None:
        """Send ``data`` (a whole request); ``finish`` is called when it is answered or fails."""
        self.busy = True
        self.tag = tag
        self.sent_at = now
        self._buf.clear()
        conn = self.conn
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            conn.transport.write(data)
            return
        self._pending = data
        if not self._connecting:
            self._connecting = True
            asyncio.get_running_loop().create_task(self._reconnect())

    async def _reconnect(self) -> None:
        try:
            await self.connect()
        except OSError as e:
            self._connecting = False
            self._pending = None
            if self.busy:
                self._done(0, type(e).__name__, b"")
            return
        self._connecting = False
        data, self._pending = self._pending, None
        if data is not None and self.conn is not None and self.conn.transport is not None:
            self.conn.transport.write(data)
        elif self.conn is not None:
            self.close()  # aborted while connecting

    def connection_lost(self) -> None:
        self.conn = None
        if self.busy and self._pending is None:
            self._done(0, "ServerDisconnected", b"")

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            return
        buf = self._buf
        buf += data
        end = buf.find(_CRLF2)
        if end < 0:
            return
        parsed = _parse_head(bytes(buf[:end]))
        if parsed is None:
            self._drop()
            self._done(0, "bad_response", b"")
            return
        status, length, chunked, close = parsed
        if chunked:
            body = _dechunk(buf, end + 4)
            if body is None:
                return
        else:
            if len(buf) < end + 4 + length:
                return
            body = bytes(buf[end + 4:end + 4 + length])
        if close:
            self._drop()
        self._done(status, None if status == 200 else f"http_{status}", body)

    def _done(self, status: int, error: str | None, body: bytes) -> None:
        self.busy = False
        self._buf.clear()
        self._finish(self, (status, error, body))


def _parse_head(head: bytes) -> tuple[int, int, bool, bool] | None:
    """(status, content-length, chunked, connection-close) of a response head."""
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None
    length, chunked, close = 0, False, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            close = b"close" in value.lower()
    return status, length, chunked, close


def _dechunk(buf: bytearray, pos: int) -> bytes | None:
    """The body of a complete chunked message starting at ``pos``; None while incomplete."""
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        if size == 0:
            return bytes(out) if buf.find(b"\r\n", eol + 2) >= 0 else None
        if len(buf) < eol + 2 + size + 2:
            return None
        out += buf[eol + 2:eol + 2 + size]
        pos = eol + 2 + size + 2


def outcome_of(result: Outcome | tuple[int, str | None, bytes]) -> Outcome:
    """The ``Outcome`` of a lane's result: a raw ``(status, error, body)`` answer is parsed
    here, after the run, off the hot path; the engine's own outcomes (Timeout...) pass as is."""
    if isinstance(result, Outcome):
        return result
    status, error, body = result
    if error is not None:
        return Outcome(error=error, status=status or None, bytes_out=len(body))
    try:
        params = json.loads(body).get("parameters") or {}
    except (ValueError, AttributeError):
        return Outcome(error="bad_response", status=status, bytes_out=len(body))
    return Outcome(
        status=status,
        degraded=bool(params.get("degraded", False)),
        served_by=_str_or_none(params.get("served_by")),
        reason=_str_or_none(params.get("reason")),
        cache=_str_or_none(params.get("cache")),
        bytes_out=len(body),
    )


def _str_or_none(v: object) -> str | None:
    return None if v is None else str(v)
