"""Timeshare's own HTTP listener in each ingress replica (#13): the data plane without Serve's
per-request machinery.

Under Ray's direct ingress a request to a replica still passes through Serve's ASGI wrapper
(request metadata, ongoing-request accounting, per-request metrics and logs) before the app
sees it; for a model whose forward takes 9 µs that wrapper is most of the request
(``benchmarks.http_throughput``: the same stock app answers about 1.6x more requests per second
under plain uvicorn than under Serve's direct ingress, docs/PERFORMANCE.md). The listener serves
the ingress's own ASGI app (the edge and everything behind it, the same app Serve serves) with
uvicorn on ``listener.port``; Serve's port keeps answering as before.

- Every ingress replica of a node binds the same port with ``SO_REUSEPORT``: the kernel spreads
  connections over them, so the port needs no per-replica number and survives autoscaling.
- What Serve no longer sees, Timeshare reports: requests in flight on the listener go to Serve's
  autoscaler as the custom metric ``LISTENER_METRIC`` (``router.scaling.ingress_policy`` adds
  them to Serve's own count); admission, shedding, limits and metrics are the edge's and the
  pipeline's, which both paths share.
- Stopping: Serve calls the ingress's ``__del__``; the listener stops accepting, lets requests
  in flight finish (up to ``drain_s``), then closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from router.scaling import LISTENER_METRIC

__all__ = ["LISTENER_METRIC", "Listener", "ListenerSettings", "start_listener"]

log = logging.getLogger("ray.serve")

KEEP_ALIVE_SWEEP_S = 1.0  # the listener looks for idle keep-alive connections this often


class ListenerSettings(BaseModel):
    """``listener:`` in the app settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int | None = Field(
        None, ge=1, le=65535, description="Serve the v2 API on this port from every ingress "
        "replica (SO_REUSEPORT), besides Serve's own port; null = off.")
    host: str = Field("127.0.0.1", description="Address to bind; 0.0.0.0 for other machines.")
    keep_alive_s: float = Field(5.0, gt=0, description="Idle keep-alive connections close after "
                                "this many seconds (looked for at least once a second).")
    drain_s: float = Field(10.0, ge=0, description="On shutdown, wait this long for requests "
                                                    "in flight before closing connections.")


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the replica's process owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


class CoalescingTransport:
    """A connection's transport that sends what one loop iteration wrote as one ``write``.

    uvicorn writes a response's status line and headers on ``http.response.start`` and the
    body on ``http.response.body``: two ``send`` system calls for every answer, which were
    about a fifth of the listener's CPU under load (docs/PERFORMANCE.md). Writes are held until
    the loop's next iteration (``call_soon``), as Node's ``cork`` then ``uncork`` on the next
    tick: an answer written at once leaves in one call, a streamed one still leaves chunk by
    chunk. Measured against sending at the second write: cache hits at c=16 +13 % requests/s,
    at c=1 about 0.05 ms later. Closing sends what is held first; everything else is the real
    transport's.
    """

    __slots__ = ("_transport", "_loop", "_held")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []  # non-empty: a flush is scheduled

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data) if not isinstance(data, bytes) else data)

    def writelines(self, lines: list[bytes]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        """Hand what is held to the real transport now."""
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held.clear()
        self._transport.abort()

    def is_closing(self) -> bool:  # once per answer (uvicorn): not through __getattr__
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(b) for b in self._held)

    def __getattr__(self, name: str) -> object:  # everything else: the real transport's
        return getattr(self._transport, name)


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a :class:`CoalescingTransport`, with its
    keep-alive timeout kept by the listener's sweep instead of a timer per answer.

    uvicorn arms a loop timer (``call_later``) after every answer and cancels it when the next
    request's bytes arrive: two timer operations per request, a few per cent of a cache hit's CPU
    (docs/PERFORMANCE.md). Here an answer only notes when the connection fell idle; the sweep
    (:meth:`Listener._sweep`, every ``KEEP_ALIVE_SWEEP_S`` at most) closes the connections idle
    for ``keep_alive_s``, as uvicorn's timer would, up to one sweep period later."""

    _idle_since: float | None = None  # loop time of the last answer; None while in use

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self._idle_since = None  # a request is arriving: in use again (uvicorn: cancel timer)
        super().data_received(data)

    def on_response_complete(self) -> None:
        # uvicorn's, without arming the timer: count, resume reading, run a pipelined request
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self._idle_since = self.loop.time()

    def close_if_idle(self, now: float, keep_alive_s: float) -> bool:
        """Close the connection if it has been idle ``keep_alive_s`` by ``now``."""
        idle = self._idle_since
        if idle is None or now - idle < keep_alive_s or self.transport.is_closing():
            return False
        self.transport.close()
        return True


class _Counted:
    """The app, counting requests in flight for Serve's autoscaler (one int, no lock: one loop)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.ongoing = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.ongoing += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.ongoing -= 1


class Listener:
    """One uvicorn server on the running loop, serving ``app`` until ``stop``."""

    def __init__(self, app: ASGIApp, settings: ListenerSettings) -> None:
        if settings.port is None:
            raise ValueError("listener.port is not set")
        self.settings = settings
        self._app = _Counted(app)
        self._server = _Server(uvicorn.Config(
            lambda: self._app, factory=True, host=settings.host, port=settings.port,
            http=_Protocol, lifespan="off", access_log=False, log_config=None,
            # no X-Forwarded-* rewriting (the edge names callers by key, not address), no
            # Server/Date headers: per-request work nobody reads
            proxy_headers=False, server_header=False, date_header=False,
            # kept by the sweep (_Protocol); uvicorn's own timer is never armed
            timeout_keep_alive=int(max(1, settings.keep_alive_s)),
            timeout_graceful_shutdown=int(settings.drain_s)))
        self._task: asyncio.Task | None = None
        self._sweeper: asyncio.Task | None = None

    @property
    def ongoing(self) -> int:
        return self._app.ongoing

    async def _sweep(self) -> None:
        """Close the keep-alive connections idle for ``keep_alive_s`` (see :class:`_Protocol`)."""
        keep_alive = self.settings.keep_alive_s
        period = min(KEEP_ALIVE_SWEEP_S, keep_alive / 2)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self._server.server_state.connections):
                if isinstance(conn, _Protocol):
                    conn.close_if_idle(now, keep_alive)

    async def start(self) -> None:
        """Bind (failing here, naming the address, when it cannot) and start serving."""
        s = self.settings
        sock = socket.socket(socket.AF_INET6 if ":" in s.host else socket.AF_INET,
                             socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((s.host, s.port))
        except OSError as e:
            sock.close()
            raise RuntimeError(f"listener: cannot bind {s.host}:{s.port}: {e}") from e
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():  # serve() ended before it started: raise its error
                self._task.result()
                raise RuntimeError(f"listener on {s.host}:{s.port} stopped before it started")
            await asyncio.sleep(0.01)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        log.info("timeshare: listener on %s:%d", s.host, s.port)

    async def stop(self) -> None:
        """Stop accepting, drain what is in flight (up to ``drain_s``), close."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.settings.drain_s + 5)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
        self._task = None


async def start_listener(app: ASGIApp, settings: ListenerSettings) -> Listener | None:
    """The started listener, or None when ``settings.port`` is not set."""
    if settings.port is None:
        return None
    listener = Listener(app, settings)
    await listener.start()
    return listener
