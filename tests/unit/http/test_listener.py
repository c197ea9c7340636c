"""router.listener: uvicorn on the ingress's ASGI app, SO_REUSEPORT, counted for the autoscaler;
router.scaling.ingress_policy adds the listener's count to Serve's. Real sockets, real uvicorn."""

from __future__ import annotations

import asyncio
import socket
from types import SimpleNamespace

import httpx
import pytest

from router.listener import (
    LISTENER_METRIC,
    CoalescingTransport,
    Listener,
    ListenerSettings,
    start_listener,
)
from router.scaling import AutoscalingSettings, ingress_policy, replica_options


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _App:
    """Answers which app it is; holds a request open until ``release`` is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def __call__(self, scope, receive, send) -> None:
        assert scope["type"] == "http"
        while (await receive()).get("more_body"):
            pass
        self.entered.set()
        await self.release.wait()
        body = self.name.encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


async def _get(port: int, n: int = 1) -> list[str]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        return [(await c.post("/v2/models/m/infer", content=b"{}")).text for _ in range(n)]


async def test_listener_serves_counts_and_drains_on_stop() -> None:
    port = _free_port()
    app = _App("a")
    listener = await start_listener(app, ListenerSettings(port=port, drain_s=5))
    assert isinstance(listener, Listener)
    assert await _get(port) == ["a"]
    assert listener.ongoing == 0
    app.release.clear()
    app.entered.clear()
    held = asyncio.create_task(_get(port))
    await asyncio.wait_for(app.entered.wait(), 5)
    assert listener.ongoing == 1
    stopping = asyncio.create_task(listener.stop())
    await asyncio.sleep(0.2)
    assert not held.done()  # stop waits for the request in flight
    app.release.set()
    assert await asyncio.wait_for(held, 5) == ["a"]
    await asyncio.wait_for(stopping, 10)
    with pytest.raises(httpx.ConnectError):  # and then no longer accepts
        await _get(port)


async def _exchange(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A keep-alive connection that has sent one request; returns the answer's bytes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return reader, writer, head + await asyncio.wait_for(reader.readexactly(1), 5)


async def test_idle_keep_alive_connections_close_and_busy_ones_stay() -> None:
    """The sweep closes a connection idle for keep_alive_s (within a sweep period), never one
    whose request is still being answered, and a connection that sends again is in use."""
    port = _free_port()
    app = _App("a")
    listener = await start_listener(app, ListenerSettings(port=port, keep_alive_s=0.3))
    assert listener is not None
    try:
        reader, writer, answer = await _exchange(port)
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"a")
        # kept open while it keeps sending: three requests 0.2 s apart (each under 0.3 s idle)
        for _ in range(3):
            await asyncio.sleep(0.2)
            writer.write(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert await asyncio.wait_for(reader.readexactly(1), 5) == b"a"
        assert await asyncio.wait_for(reader.read(1), 2) == b""  # then idle: closed
        # a request held for 1 s (over keep_alive_s) is answered on its connection
        app.release.clear()
        app.entered.clear()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}")
        await asyncio.wait_for(app.entered.wait(), 5)
        await asyncio.sleep(1.0)
        app.release.set()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"a"
        writer.close()
    finally:
        await listener.stop()


async def test_two_replicas_share_one_port() -> None:
    """SO_REUSEPORT: a second ingress replica on the node binds the same port; both serve."""
    port = _free_port()
    first = await start_listener(_App("a"), ListenerSettings(port=port))
    second = await start_listener(_App("b"), ListenerSettings(port=port))
    assert first is not None and second is not None
    try:
        seen: set[str] = set()
        for _ in range(40):  # the kernel spreads new connections over both sockets
            seen.update(await _get(port))
            if seen == {"a", "b"}:
                break
        assert seen == {"a", "b"}
    finally:
        await first.stop()
        await second.stop()


async def test_no_port_no_listener_and_a_taken_port_names_the_address() -> None:
    assert await start_listener(_App("a"), ListenerSettings()) is None
    with socket.socket() as taken:  # bound without SO_REUSEPORT: nobody may share it
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"cannot bind 127.0.0.1:{port}"):
            await start_listener(_App("a"), ListenerSettings(port=port))


def _ctx(replicas: int, serve_ongoing: float, listener: dict[str, float] | None, target: float):
    config = SimpleNamespace(get_target_ongoing_requests=lambda: target)
    metrics = None if listener is None else {LISTENER_METRIC: listener}
    return SimpleNamespace(current_num_replicas=replicas, target_num_replicas=replicas,
                           total_num_requests=serve_ongoing, aggregated_metrics=metrics,
                           config=config)


def test_ingress_policy_adds_the_listeners_requests_to_serves() -> None:
    # 2 replicas, target 10 each: 5 through Serve + 35 on the listeners = 40 -> 4 replicas
    desired, _ = ingress_policy(_ctx(2, 5, {"r1": 20, "r2": 15}, 10))
    assert desired == pytest.approx(4.0)
    # nothing on the listener (or no custom metric yet): Serve's own rule
    assert ingress_policy(_ctx(2, 5, None, 10))[0] == pytest.approx(0.5)
    assert ingress_policy(_ctx(0, 0, None, 10))[0] == 0


def test_autoscaled_ingress_uses_the_policy() -> None:
    auto = AutoscalingSettings(min_replicas=1, max_replicas=4, target_ongoing_requests=8)
    opts = replica_options(1, auto, policy="router.scaling:ingress_policy")
    assert opts["autoscaling_config"]["policy"] == {
        "policy_function": "router.scaling:ingress_policy"}
    assert "policy" not in replica_options(1, auto)["autoscaling_config"]



class _RecordingTransport(asyncio.Transport):
    """A real ``asyncio.Transport`` that records what reaches it (no socket)."""

    def __init__(self) -> None:
        super().__init__(extra={"peername": ("127.0.0.1", 9)})
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_write_buffer_size(self) -> int:
        return 0


async def test_coalescing_transport_joins_headers_and_body_and_still_streams() -> None:
    real = _RecordingTransport()
    t = CoalescingTransport(real, asyncio.get_running_loop())
    t.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t.write(bytearray(b"body"))
    assert real.writes == [] and t.get_write_buffer_size() == 23  # held to the iteration's end
    await asyncio.sleep(0)
    assert real.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]  # in one call
    t.write(b"chunk")  # a stream's next chunk leaves on the next iteration by itself
    assert real.writes[1:] == []
    await asyncio.sleep(0)
    assert real.writes[1:] == [b"chunk"]
    t.write(b"")
    t.write(b"last")
    t.close()  # closing sends what is held first
    assert real.writes[2:] == [b"last"] and real.closed
    assert t.get_extra_info("peername") == ("127.0.0.1", 9)  # the rest is the real transport's
    other = _RecordingTransport()
    t = CoalescingTransport(other, asyncio.get_running_loop())
    t.write(b"dropped")
    t.abort()
    await asyncio.sleep(0)
    assert other.writes == [] and other.aborted


class _Streaming:
    """Streams three chunks; the next one only after the client has read the previous."""

    def __init__(self) -> None:
        self.read = [asyncio.Event() for _ in range(3)]

    async def __call__(self, scope, receive, send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(3):
            await send({"type": "http.response.body", "body": f"c{i};".encode(),
                        "more_body": True})
            await self.read[i].wait()
        await send({"type": "http.response.body", "body": b"end"})


async def test_the_listener_streams_chunk_by_chunk_and_closes_whole() -> None:
    port = _free_port()
    app = _Streaming()
    listener = await start_listener(app, ListenerSettings(port=port))
    assert listener is not None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
            async with c.stream("POST", "/s", content=b"{}") as r:
                got, i = b"", 0
                async for part in r.aiter_raw():
                    got += part
                    while i < 3 and f"c{i};".encode() in got:  # a chunk held back would hang
                        app.read[i].set()
                        i += 1
            assert got == b"c0;c1;c2;end"
            one = _App("whole")  # a response before the server closes the connection
            await listener.stop()
            listener = await start_listener(one, ListenerSettings(port=port))
            r = await c.post("/x", content=b"{}", headers={"connection": "close"})
            assert r.text == "whole"
    finally:
        assert listener is not None
        await listener.stop()
