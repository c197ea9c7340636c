"""A null KServe-v2 server: answers ``POST /v2/models/<m>/infer`` with a fixed result.

Run in its own process (``null_server()``, or ``python -c "from
deploy.loadtest._private.nullserver import main; main()" --port 0``; it prints ``PORT <n>`` once
listening) so that the generator under calibration does not share a core's
interpreter with it. It is a raw asyncio protocol (uvloop when installed): a few microseconds
per request, so what a load test measures against it is the tool's own cost (plus loopback).
``--delay-ms`` adds a constant service time (``loop.call_later`` on the stdlib loop, whose
timers never fire early), for tests with a known answer.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator

from deploy.loadtest._private.engine import run_fast

__all__ = ["null_server", "serve"]

_BODY = json.dumps({
    "model_name": "null", "outputs": [{"name": "label", "shape": [1], "datatype": "INT64",
                                       "data": [0]}],
    "parameters": {"degraded": False, "served_by": "null", "cache": "off"},
}).encode()
_RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
             + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


class _Server(asyncio.Protocol):
    def __init__(self, delay_s: float) -> None:
        self._delay = delay_s
        self._buf = bytearray()
        self._t: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._t = transport  # type: ignore[assignment] # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while True:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self._buf) < end + 4 + length:
                return
            del self._buf[:end + 4 + length]
            ok = head.startswith(b"POST ") and b"/infer " in head.split(b"\r\n", 1)[0]
            self._answer(_RESPONSE if ok else _NOT_FOUND)

    def _answer(self, data: bytes) -> None:
        if self._delay > 0:
            asyncio.get_running_loop().call_later(self._delay, self._write, data)
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self._t is not None and not self._t.is_closing():
            self._t.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._t = None


async def serve(port: int, delay_ms: float) -> None:
    """Listen on 127.0.0.1:``port`` (0: any free port), print ``PORT <n>``, serve forever."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Server(delay_ms / 1000.0), "127.0.0.1", port,
                                      backlog=4096)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def null_server(delay_ms: float = 0.0) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """Start the null server in a child process; yields (process, base URL); stops it after."""
    code = "from deploy.loadtest._private.nullserver import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", code, "--port", "0", "--delay-ms",
                             str(delay_ms)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise RuntimeError(f"null server did not start (exit {proc.poll()}): {line!r}")
        yield proc, f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--delay-ms", type=float, default=0.0)
    a = p.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        if a.delay_ms > 0:
            # asyncio's timers are exact floats and never fire early; libuv's are whole
            # milliseconds of a cached clock, so a 5 ms delay can last ~3.5-5 ms, which would
            # blur the known service time tests compare against.
            asyncio.run(serve(a.port, a.delay_ms))
        else:
            run_fast(serve(a.port, a.delay_ms))


if __name__ == "__main__":
    main()
