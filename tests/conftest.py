"""Session-wide fixtures shared by unit, integration and e2e tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

SMALL_DEMO = ["digits-small", "digits-large", "iris-mlp1x16", "iris-mlp1x64", "iris-mlp2x16"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def demo_repo_master(tmp_path_factory) -> Path:
    """A small demo repository (real models trained on bundled data), built once per session."""
    from deploy.demo import build_demo_repository

    root = tmp_path_factory.mktemp("demo") / "repo"
    build_demo_repository(root, only=SMALL_DEMO)
    return root


@pytest.fixture
def demo_repo(demo_repo_master, tmp_path) -> Path:
    """A private copy of the small demo repository that a test may change."""
    dst = tmp_path / "repo"
    shutil.copytree(demo_repo_master, dst)
    return dst


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_url():
    """URL of a real Redis server: the local one on 6379, else one started here.

    Skips (saying why) only when no server runs and no ``redis-server`` binary is installed.
    """
    if _redis_ping(6379):
        yield "redis://127.0.0.1:6379/0"
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs Redis: nothing answers on 127.0.0.1:6379 and no redis-server binary "
                    "is installed (apt-get install redis-server)")
    port = free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL)
    for _ in range(100):
        if _redis_ping(port):
            break
        time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="session")
def minilm():
    """The bundled MiniLM embedder, loaded once per session (a few seconds)."""
    from router.cache import MiniLMEmbedder

    return MiniLMEmbedder.load()
