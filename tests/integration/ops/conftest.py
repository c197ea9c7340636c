"""Fixtures: a real HTTP server with injected latency, in its own process on a free port."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.ports import free_port

_ROOT = Path(__file__).resolve().parents[3]


def _start(*args: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.ops.latency_server", "--port", str(port), *args],
        cwd=_ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"latency server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=0.5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("latency server did not start within 20 s")


@pytest.fixture(scope="module")
def latency_server() -> Iterator[str]:
    """Base URL of a server injecting 50 ms + Exp(mean 100 ms) per request."""
    proc, url = _start("--base-ms", "50", "--exp-mean-ms", "100", "--seed", "3")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def steady_server() -> Iterator[str]:
    """Base URL of a server answering after a constant 5 ms (for stall tests)."""
    proc, url = _start("--base-ms", "5", "--exp-mean-ms", "0")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def reset(latency_server: str) -> None:
    httpx.post(f"{latency_server}/control/reset").raise_for_status()
