"""The real app in-process: the ingress's class built without a Ray cluster, over a real
pipeline and its in-ingress CPU pool (``cpu_pool.placement: ingress``), on a
``RecordingHost`` over a ``RecordingWorker``, so that tests can see what reached the pool and
the worker.

Used by every unit test that needs the whole app (HTTP through httpx's ASGI transport, the
handle methods called directly).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import pool.service
from router.ingress import Ingress
from router.settings import load_settings
from tests.support.recording import RecordingHost, RecordingWorker

__all__ = ["ADMIN_KEY", "API_KEY", "CALLER_KEYS", "host_of", "start_ingress", "stop_ingress",
           "worker_of"]

API_KEY = "test-key"  # the operator key of the app on a local Ray Serve (integration tests)
ADMIN_KEY = "admin-key"  # the operator key of the in-process app (unit tests)
CALLER_KEYS = {"key-finance": "team-finance", "key-search": "team-search"}


async def start_ingress(settings: dict[str, Any], *, ready: tuple[str, ...] = (),
                        timeout_s: float = 30.0) -> Any:
    """An ``Ingress`` built from ``settings`` (a dict for ``load_settings``), once the models
    in ``ready`` are ready (a just-built repository settles first). Raises if they are not
    within ``timeout_s`` (a hang, not a slow machine, breaks that)."""
    cls = Ingress.func_or_class  # the deployment's class, built without a Ray cluster
    ing = cls.__new__(cls)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pool.service, "DeviceWorker", RecordingWorker)  # the local pool's worker
        mp.setattr(pool.service, "ModelHost", RecordingHost)  # and its host
        await ing.__init__(load_settings(settings), {}, None)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        await ing.catalog.refresh()
        snap = ing.catalog.snapshot()
        if all(snap.get(m) and snap[m].ready for m in ready):
            return ing
        if loop.time() > deadline:
            await stop_ingress(ing)
            raise AssertionError(f"models not ready after {timeout_s} s: {snap}")
        await asyncio.sleep(0.05)


async def stop_ingress(ing: Any) -> None:
    """Shut the ingress down as Serve would, and check nothing of it keeps running."""
    await ing.__del__()
    assert all(t.done() for t in ing._tasks), "background tasks survived shutdown"


def worker_of(ing: Any) -> RecordingWorker:
    """The in-ingress CPU pool's worker."""
    worker = ing._local.host.worker
    assert isinstance(worker, RecordingWorker), type(worker)
    return worker


def host_of(ing: Any) -> RecordingHost:
    """The in-ingress CPU pool's host."""
    host = ing._local.host
    assert isinstance(host, RecordingHost), type(host)
    return host
