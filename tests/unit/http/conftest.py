"""The real HTTP app in-process: the ingress's FastAPI app over a real pipeline and an
in-process CPU pool serving the small demo repository (no Ray cluster, no server socket)."""

from __future__ import annotations

import httpx
import pytest_asyncio

from tests.support.app import ADMIN_KEY, CALLER_KEYS, start_ingress, stop_ingress
from tests.support.demo import SMALL_DEMO

ROUTES = [{"name": "digits", "strategy": "cascade", "cheap": "digits-small",
           "expensive": "digits-large", "threshold": 0.9, "spill": "cheap"}]


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def ingress(demo_repo_master, tmp_path_factory):
    root = tmp_path_factory.mktemp("http")
    ing = await start_ingress({
        "repository": str(demo_repo_master), "state_dir": str(root / "state"),
        "api_key": ADMIN_KEY, "caller_keys": CALLER_KEYS, "routes": ROUTES,
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 256},
        "call_log": {"path": str(root / "calls.jsonl")}, "default_deadline_ms": 5000,
    }, ready=tuple(SMALL_DEMO))
    yield ing
    await stop_ingress(ing)


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def client(ingress):
    transport = httpx.ASGITransport(app=ingress.__serve_build_asgi_app__())
    async with httpx.AsyncClient(transport=transport, base_url="http://timeshare") as c:
        yield c
