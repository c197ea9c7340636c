"""Real Redis for tests: one ping and one private ``redis-server`` class.

The root ``redis_url`` fixture (tests/conftest.py) is the only way a test reaches a shared Redis;
``own_redis`` gives a test a private server it may kill and restart. Both are built from here.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest

from tests.support.ports import free_port

__all__ = ["RedisServer", "redis_binary", "redis_binary_or_skip", "redis_ping"]


def redis_ping(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a Redis answers PING on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def redis_binary_or_skip(why: str) -> str:
    """The ``redis-server`` binary; else the test skips, saying ``why`` it needed one."""
    binary = redis_binary()
    if binary is None:
        pytest.skip(f"needs Redis: {why} and no redis-server binary is installed "
                    "(apt-get install redis-server)")
    return binary


class RedisServer:
    """A throwaway ``redis-server`` (no persistence) on a free loopback port.

    Not started by the constructor, so a test can first see what "nothing listening" does.
    """

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10  # a hang, not a slow start, breaks this
        while not redis_ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Hard stop (SIGKILL), as a crash would."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    kill = stop
