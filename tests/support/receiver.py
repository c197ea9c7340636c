"""A real HTTP receiver on 127.0.0.1 that records requests and answers from a script."""

from __future__ import annotations

import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class Receiver:
    """Answers each path from ``script[path]`` (a list of (status, body, headers), popped in
    order; the last one repeats), else 200 ``{"errcode": 0, "code": 0}``."""

    server: ThreadingHTTPServer
    requests: list[Received] = field(default_factory=list)
    script: dict[str, list[tuple[int, str, dict[str, str]]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    def on(self, path: str, *answers: tuple[int, str] | tuple[int, str, dict[str, str]]) -> None:
        self.script[path] = [(a[0], a[1], a[2] if len(a) > 2 else {}) for a in answers]  # type: ignore[misc]

    def at(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.path == path]


def start_receiver() -> Receiver:
    holder: dict[str, Receiver] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            rec = holder["r"]
            parts = urllib.parse.urlsplit(self.path)
            raw = self.rfile.read(int(self.headers.get("content-length", "0")))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
            with rec.lock:
                rec.requests.append(
                    Received(
                        parts.path, query, {k.lower(): v for k, v in self.headers.items()}, body
                    )
                )
                answers = rec.script.get(parts.path)
                status, text, headers = (
                    (answers.pop(0) if len(answers) > 1 else answers[0])
                    if answers
                    else (200, '{"errcode": 0, "code": 0}', {})
                )
            data = text.encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for k, v in headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    holder["r"] = Receiver(server)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    return holder["r"]


def dead_url(path: str = "/hook") -> str:
    """A loopback URL where nothing listens (the port was bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}{path}"
