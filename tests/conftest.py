"""Session-wide fixtures shared by unit, integration and e2e tests."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.support.demo import SMALL_DEMO
from tests.support.redis import RedisServer, redis_binary_or_skip, redis_ping


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


@pytest.fixture(scope="session")
def redis_url():
    """URL of a real Redis server, the one way a test reaches a shared Redis: the one at
    ``TIMESHARE_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) when it answers, else a
    private ``redis-server`` started here for the session.

    Skips (saying why) only when no server answers and no ``redis-server`` binary is installed.
    Tests write under their own key prefix and never flush the database.
    """
    url = os.environ.get("TIMESHARE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    parsed = urlparse(url)
    if redis_ping(parsed.port or 6379, parsed.hostname or "127.0.0.1"):
        yield url
        return
    server = RedisServer(redis_binary_or_skip(f"nothing answers at {url}")).start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def own_redis():
    """A private ``redis-server``, started, that this test may kill and restart
    (``.stop()``/``.start()``, same port)."""
    server = RedisServer(redis_binary_or_skip("a private Redis is needed")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server():
    """A private ``redis-server``, not started: for a test that first sees Redis absent."""
    server = RedisServer(redis_binary_or_skip("a private Redis is needed"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def key_prefix() -> str:
    """A key prefix of this test's own in the shared Redis."""
    return f"ts:test:{uuid.uuid4().hex[:8]}:"


@pytest.fixture(scope="session")
def minilm():
    """The bundled MiniLM embedder, loaded once per session (a few seconds)."""
    from router.cache import MiniLMEmbedder

    return MiniLMEmbedder.load()
