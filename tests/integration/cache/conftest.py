"""Fixtures for cache integration tests: a real Redis server and the real MiniLM embedder.

Redis: uses the server at ``TIMESHARE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) when
one answers; otherwise starts ``redis-server`` on a free port for the session when the binary is
installed; otherwise the tests skip, saying which is missing. Tests write under a unique key
prefix and never flush the database.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from urllib.parse import urlparse

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers_ping(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """A throwaway ``redis-server`` (no persistence) on a given loopback port."""

    def __init__(self, port: int | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server binary not installed (needed to start a test Redis)")
        self.binary = binary
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _answers_ping("127.0.0.1", self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """Hard stop (SIGKILL), as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None


@pytest.fixture(scope="session")
def redis_url():
    url = os.environ.get("TIMESHARE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    parsed = urlparse(url)
    if _answers_ping(parsed.hostname or "127.0.0.1", parsed.port or 6379):
        yield url
        return
    if shutil.which("redis-server") is None:
        pytest.skip(
            f"no Redis answers at {url} and the redis-server binary is not installed: "
            "install redis-server or set TIMESHARE_TEST_REDIS_URL"
        )
    server = RedisServer().start()  # skips when the binary is missing
    try:
        yield server.url
    finally:
        server.kill()


@pytest.fixture
def key_prefix() -> str:
    return f"ts:test:{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def own_redis():
    """A private Redis this test may kill and restart."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.kill()

