"""The real HTTP app in-process: the ingress's FastAPI app over a real pipeline and an
in-process CPU pool serving the small demo repository (no Ray cluster, no server socket)."""

from __future__ import annotations

import asyncio

import httpx
import pytest_asyncio

from router.ingress import Ingress
from router.settings import load_settings
from tests.conftest import SMALL_DEMO

ADMIN_KEY = "admin-key"
CALLER_KEYS = {"key-finance": "team-finance", "key-search": "team-search"}
ROUTES = [{"name": "digits", "strategy": "cascade", "cheap": "digits-small",
           "expensive": "digits-large", "threshold": 0.9, "spill": "cheap"}]


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def ingress(demo_repo_master, tmp_path_factory):
    root = tmp_path_factory.mktemp("http")
    settings = load_settings({
        "repository": str(demo_repo_master), "state_dir": str(root / "state"),
        "api_key": ADMIN_KEY, "caller_keys": CALLER_KEYS, "routes": ROUTES,
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 256},
        "call_log": {"path": str(root / "calls.jsonl")}, "default_deadline_ms": 5000,
    })
    cls = Ingress.func_or_class  # the deployment's class, built without a Ray cluster
    ing = cls.__new__(cls)
    await ing.__init__(settings, {}, None)
    for _ in range(300):  # a just-built repository settles (pool.repository.settle_s) first
        await ing.catalog.refresh()
        if all(ing.catalog.snapshot().get(m) and ing.catalog.snapshot()[m].ready
               for m in SMALL_DEMO):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"demo models not ready: {ing.catalog.snapshot()}")
    yield ing
    await ing.__del__()
    assert all(t.done() for t in ing._tasks), "background tasks survived shutdown"


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def client(ingress):
    transport = httpx.ASGITransport(app=ingress.__serve_build_asgi_app__())
    async with httpx.AsyncClient(transport=transport, base_url="http://timeshare") as c:
        yield c
