"""A small, fast HTTP/1.1 load client (raw asyncio streams, keep-alive), run in its own process.

``python -m benchmarks._openloop`` reads one JSON job on stdin and prints one JSON result:

* ``{"mode": "open", "port": P, "path": "/v2/...", "rate": R, "seconds": S, "mix": {"realtime":
  0.2, ...}, "body": {class: body text}, "seed": 0, "headers": {class: {name: value}}}``
  (``headers`` optional: sent with that class's requests; ``"request_start": true`` stamps each
  request ``X-Request-Start`` with its planned instant): Poisson arrivals at ``rate`` per second;
  each request is sent at its planned instant on a free keep-alive connection (a new one when
  none is free, so a slow server never slows the sender); latency is measured from the planned
  instant, so queueing in the client counts against the server, not for it.
* ``{"mode": "closed", "port": P, "path": ..., "concurrency": C, "seconds": S, "body": {...}}``:
  ``C`` workers back to back, for the capacity.

Each answer is ``[class, latency_s, status, degraded, shed_label, edge_s, reason]``; status 0 =
no answer within ``timeout_s`` (or a connection error); ``edge_s``: the server's ``Server-Timing:
edge`` (arrival at the edge to response start), None when absent; ``reason``: a degraded answer's
``reason`` label (its first 60 characters), else None.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import sys
import time
from typing import Any

from benchmarks._http_client import is_degraded

__all__ = ["Client"]


class Client:
    """Keep-alive HTTP/1.1 POSTs to 127.0.0.1:``port``."""

    def __init__(self, port: int, path: str, *, timeout_s: float = 30.0) -> None:
        self.port = port
        self.path = path
        self.timeout_s = timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._all: list[asyncio.StreamWriter] = []

    def raw(self, body: bytes, headers: dict[str, str] | None = None) -> bytes:
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        return (f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                ).encode() + body

    async def post(self, raw: bytes) -> tuple[int, bytes, float | None]:
        """Status (0: none), body, and the server's ``Server-Timing: edge;dur=`` in seconds."""
        try:
            async with asyncio.timeout(self.timeout_s):
                reused = bool(self._idle)
                try:
                    return await self._post(raw)
                except (ConnectionError, asyncio.IncompleteReadError, IndexError):
                    if not reused:
                        raise
                    return await self._post(raw, fresh=True)  # the server closed an idle one
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            return 0, b"", None

    async def _post(self, raw: bytes, *, fresh: bool = False
                    ) -> tuple[int, bytes, float | None]:
        if self._idle and not fresh:
            reader, writer = self._idle.pop()
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            self._all.append(writer)
        writer.write(raw)
        status = int((await reader.readline()).split()[1])
        length, close, edge = 0, False, None
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.partition(b":")
            k = k.strip().lower()
            if k == b"content-length":
                length = int(v)
            elif k == b"connection" and v.strip().lower() == b"close":
                close = True
            elif k == b"server-timing" and b"edge;dur=" in v:
                edge = float(v.split(b"edge;dur=")[1].split(b",")[0]) / 1000.0
        body = await reader.readexactly(length) if length else b""
        if length == 0 and status >= 400:
            close = True  # no length to frame the body by: do not reuse the connection
        if close:
            writer.close()
        else:
            self._idle.append((reader, writer))
        return status, body, edge

    def close(self) -> None:
        for w in self._all:
            w.close()


_REASON = re.compile(rb'"reason":\s*"([^"]{0,60})')


def _labels(status: int, body: bytes) -> tuple[bool, bool]:
    degraded = is_degraded(body)
    shed = status in (429, 503) or (degraded and b"shed" in body)
    return degraded, shed


def _reason(body: bytes) -> str | None:
    m = _REASON.search(body) if is_degraded(body) else None
    return m.group(1).decode("utf-8", "replace") if m else None


async def run_open(job: dict[str, Any]) -> list[list[Any]]:
    client = Client(job["port"], job["path"], timeout_s=job.get("timeout_s", 30.0))
    rng = random.Random(job.get("seed", 0))
    classes = list(job["mix"])
    weights = [job["mix"][c] for c in classes]
    headers = job.get("headers") or {}
    raws = {c: client.raw(job["body"][c].encode(), headers.get(c)) for c in classes}
    # ``request_start``: each request stamped X-Request-Start at its planned instant (Unix s)
    # (after the request line: the line before it, the rest after it)
    stamped = {c: raw.split(b"\r\n", 1) for c, raw in raws.items()
               } if job.get("request_start") else None
    wall = time.time() - time.monotonic()  # Unix time at monotonic 0
    plan, t = [], 0.0
    while True:
        t += rng.expovariate(job["rate"])
        if t >= job["seconds"]:
            break
        plan.append((t, rng.choices(classes, weights)[0]))
    out: list[list[Any]] = []

    async def one(at: float, cls: str) -> None:
        if stamped is None:
            raw = raws[cls]
        else:
            line, rest = stamped[cls]
            raw = b"%s\r\nX-Request-Start: t=%.6f\r\n%s" % (line, wall + at, rest)
        status, body, edge = await client.post(raw)
        out.append([cls, time.monotonic() - at, status, *_labels(status, body), edge,
                    _reason(body)])

    start = time.monotonic() + 0.1
    tasks = []
    for offset, cls in plan:
        delay = start + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(start + offset, cls)))
    await asyncio.gather(*tasks)
    client.close()
    return out


async def run_closed(job: dict[str, Any]) -> list[list[Any]]:
    client = Client(job["port"], job["path"], timeout_s=job.get("timeout_s", 30.0))
    cls = next(iter(job["body"]))
    raw = client.raw(job["body"][cls].encode())
    out: list[list[Any]] = []
    stop = time.monotonic() + job["seconds"]

    async def worker() -> None:
        while time.monotonic() < stop:
            t0 = time.monotonic()
            status, body, edge = await client.post(raw)
            out.append([cls, time.monotonic() - t0, status, *_labels(status, body), edge])

    await asyncio.gather(*(worker() for _ in range(job["concurrency"])))
    client.close()
    return out


def main() -> None:
    job = json.loads(sys.stdin.read())
    runner = run_open if job["mode"] == "open" else run_closed
    t0 = time.monotonic()
    answers = asyncio.run(runner(job))
    json.dump({"answers": answers, "wall_s": time.monotonic() - t0}, sys.stdout)


if __name__ == "__main__":
    main()
