"""A lean HTTP/1.1 load client and a null server, each run in its own process.

Raw asyncio streams (uvloop when installed) with keep-alive connections: on a 2-core machine an
httpx or aiohttp client spends more CPU per request than the server under test, and the server's
figures would then be the client's. ``null_server`` answers every request with a fixed small
JSON body without parsing it, so a run against it measures the client's own cost.

Closed loop: ``concurrency`` connections, each sending its next request when the previous
answer arrived. Open loop: requests start at Poisson arrival times at ``rate`` per second, on
any idle connection (new ones opened as needed, up to ``max_connections``); latency is measured
from the scheduled start, so a client or server that falls behind is charged for it.

Only model answers count: a 200 whose body says ``"degraded":true`` (Timeshare's labelled
fallback, e.g. a request shed under overload) is counted in ``n_degraded``, not in the latencies,
so an arm cannot look faster or keep up with a higher rate by answering with fallbacks.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from dataclasses import dataclass

__all__ = ["LoadSpec", "is_degraded", "null_server", "run_load"]

_NULL_BODY = b'{"model_name":"null","outputs":[]}'
_DEGRADED = re.compile(rb'"degraded":\s*true')  # Timeshare's v2 parameters (orjson or json)


def is_degraded(body: bytes) -> bool:
    """Does this answer carry Timeshare's degraded label (a fallback, not the model)?"""
    return _DEGRADED.search(body) is not None


@dataclass(frozen=True, slots=True)
class LoadSpec:
    host: str
    port: int
    path: str
    body: bytes
    duration_s: float
    concurrency: int = 1  # closed loop when rate is None
    rate: float | None = None  # open loop: Poisson arrivals per second
    warmup_s: float = 0.5
    max_connections: int = 256
    seed: int = 0


def _request_bytes(spec: LoadSpec) -> bytes:
    head = (f"POST {spec.path} HTTP/1.1\r\nHost: {spec.host}:{spec.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(spec.body)}\r\n"
            "Connection: keep-alive\r\n\r\n")
    return head.encode() + spec.body


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    raw: bytes) -> tuple[int, bytes]:
    writer.write(raw)
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split(b" ", 2)[1])
    length, chunked = 0, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = bytearray()
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            return status, bytes(body)
        body += await reader.readexactly(size)
        await reader.readline()


async def _closed(spec: LoadSpec, raw: bytes) -> dict:
    start = time.perf_counter()
    measure_from = start + spec.warmup_s
    stop = measure_from + spec.duration_s
    lat: list[float] = []
    errors: list[str] = []
    degraded = 0
    last_body: list[bytes] = []

    async def worker() -> None:
        nonlocal degraded
        reader, writer = await asyncio.open_connection(spec.host, spec.port)
        try:
            while (t0 := time.perf_counter()) < stop:
                status, body = await _exchange(reader, writer, raw)
                t1 = time.perf_counter()
                if status != 200:
                    errors.append(f"HTTP {status}: {body[:200]!r}")
                elif t0 < measure_from:
                    pass
                elif is_degraded(body):
                    degraded += 1
                else:
                    lat.append(t1 - t0)
                    if not last_body:
                        last_body.append(body)
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
    return {"latencies_s": lat, "errors": errors[:5], "n_errors": len(errors),
            "n_degraded": degraded, "duration_s": spec.duration_s,
            "body": (last_body or [b""])[0].decode()}


async def _open(spec: LoadSpec, raw: bytes) -> dict:
    assert spec.rate is not None
    rng = random.Random(spec.seed)
    idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    opened = 0
    lat: list[float] = []
    errors: list[str] = []
    degraded = 0
    tasks: set[asyncio.Task] = set()
    start = time.perf_counter()
    measure_from = start + spec.warmup_s
    stop = measure_from + spec.duration_s

    async def one(scheduled: float) -> None:
        nonlocal opened, degraded
        if idle:
            conn = idle.pop()
        elif opened < spec.max_connections:
            opened += 1
            conn = await asyncio.open_connection(spec.host, spec.port)
        else:
            errors.append("client: out of connections")
            return
        try:
            status, body = await _exchange(conn[0], conn[1], raw)
        except Exception as e:  # noqa: BLE001 - counted, the run goes on
            errors.append(f"{type(e).__name__}: {e}")
            conn[1].close()
            opened -= 1
            return
        t1 = time.perf_counter()
        idle.append(conn)
        if status != 200:
            errors.append(f"HTTP {status}: {body[:200]!r}")
        elif scheduled < measure_from:
            pass
        elif is_degraded(body):
            degraded += 1
        else:
            lat.append(t1 - scheduled)

    t = start
    scheduled = 0
    while t < stop:
        t += rng.expovariate(spec.rate)
        scheduled += measure_from <= t < stop
        delay = t - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.get_running_loop().create_task(one(t))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=30)
    for _, w in idle:
        w.close()
    return {"latencies_s": lat, "errors": errors[:5], "n_errors": len(errors),
            "n_degraded": degraded, "duration_s": spec.duration_s, "scheduled": scheduled}


def _loop_policy() -> None:
    try:
        import uvloop
    except ImportError:  # plain asyncio works, a little slower
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_load(spec: LoadSpec) -> dict:
    """Run one load in this (client) process; returns the raw latencies and errors."""
    _loop_policy()
    raw = _request_bytes(spec)
    return asyncio.run(_closed(spec, raw) if spec.rate is None else _open(spec, raw))


def null_server(port: int, ready) -> None:
    """Serve fixed 200 answers on ``port`` until killed; sets ``ready`` once listening."""
    _loop_policy()
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(_NULL_BODY)).encode() + b"\r\n\r\n" + _NULL_BODY)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                length = 0
                while True:
                    line = await reader.readline()
                    if not line:
                        return
                    if line in (b"\r\n", b"\n"):
                        break
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                writer.write(response)
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())
