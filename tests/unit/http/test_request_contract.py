"""What a request says reaches the worker unchanged, and comes back in the call log.

Through the real app in-process (edge, v2 decoding, ingress, pipeline, cache, chain, the pool's
host) to the real ``DeviceWorker`` (``tests.support.recording.RecordingWorker``): over HTTP and
over the handle methods, a request's priority class, caller, request id, model and version
cross into the pool as sent (the host's ``PoolWork``), its priority, deadline, model and version
reach the worker as sent, and the call log's line for it carries them back.

Every priority class is sent, so forcing any one class anywhere on the way (the pipeline's
``PoolWork``, the host's ``worker.infer``) fails here.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from policies.priority import Priority
from router.schemas import CacheControl, InferenceRequest
from tests.support.app import host_of, worker_of
from tests.support.recording import Handed
from tests.support.v2 import digits_body

pytestmark = pytest.mark.asyncio(loop_scope="package")

MODEL, VERSION = "digits-small", "1"
# Each class with its own deadline (ms), so a deadline taken from the wrong request, or the
# app's default (5000 ms), shows.
CASES = [(Priority.REALTIME, 3100.0), (Priority.INTERACTIVE, 3700.0), (Priority.BATCH, 4300.0),
         (Priority.BACKGROUND, 2500.0)]
CALLERS = {"key-finance": "team-finance", "key-search": "team-search"}
HANG_S = 1.0  # a deadline shorter by this much at the worker means a hang, not a slow machine


def _pixels(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 16, (1, 64)).astype(np.float32)


def _only_call(worker, before: int) -> Handed:
    handed = worker.since(before)
    assert len(handed) == 1, handed  # one request, one call at the worker
    return handed[0]


def _assert_crossed(host, before: int, priority: Priority, caller: str, request_id: str) -> None:
    """The one PoolWork the pool's host got for the request carries what the request said."""
    (work,) = host.since(before)
    assert (work.model, work.version, work.priority) == (MODEL, VERSION, priority), work
    assert (work.caller, work.request_id) == (caller, request_id), work


def _assert_arrived(h: Handed, priority: Priority, deadline_ms: float) -> None:
    assert (h.key.name, h.key.version) == (MODEL, VERSION)
    assert h.priority is priority
    assert h.deadline is not None
    left_s = h.deadline - h.at  # the worker's own clock on both sides
    assert deadline_ms / 1e3 - HANG_S < left_s <= deadline_ms / 1e3, left_s


async def _call_log_line(path: Path, request_id: str, timeout_s: float = 10.0) -> dict:
    """The call log's line for ``request_id`` once the log's writer has written it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                doc = json.loads(line)
                if doc["request_id"] == request_id:
                    return doc
        await asyncio.sleep(0.02)
    raise AssertionError(f"no call log line for {request_id} after {timeout_s} s")


def _assert_logged(doc: dict, priority: Priority, caller: str) -> None:
    assert (doc["model"], doc["version"]) == (MODEL, VERSION), doc
    assert doc["priority"] == priority.label, doc
    assert (doc["caller"], doc["caller_verified"]) == (caller, True), doc
    assert doc["served_by"].endswith(f"{MODEL}@{VERSION}") and not doc["degraded"], doc


@pytest.mark.parametrize("priority, deadline_ms", CASES)
@pytest.mark.parametrize("key", sorted(CALLERS))
async def test_over_http_the_worker_sees_what_was_sent(client, ingress, priority, deadline_ms,
                                                        key):
    worker, host = worker_of(ingress), host_of(ingress)
    before, runs = worker.calls, host.runs
    rid = f"contract-http-{priority.label}-{key}"
    r = await client.post(
        f"/v2/models/{MODEL}/versions/{VERSION}/infer",
        json={**digits_body(_pixels(int(deadline_ms)).ravel().tolist(), priority=priority.label,
                            deadline_ms=deadline_ms, cache_skip_read=True), "id": rid},
        headers={"Authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == rid
    _assert_crossed(host, runs, priority, CALLERS[key], rid)
    _assert_arrived(_only_call(worker, before), priority, deadline_ms)
    doc = await _call_log_line(Path(ingress.settings.call_log.path), rid)
    _assert_logged(doc, priority, CALLERS[key])


@pytest.mark.parametrize("priority, deadline_ms", CASES)
@pytest.mark.parametrize("key", sorted(CALLERS))
async def test_over_the_handle_the_worker_sees_what_was_sent(ingress, priority, deadline_ms,
                                                              key):
    worker, host = worker_of(ingress), host_of(ingress)
    before, runs = worker.calls, host.runs
    req = InferenceRequest(model=MODEL, version=VERSION, inputs={"pixels": _pixels(7)},
                           priority=priority, deadline_ms=deadline_ms, caller=CALLERS[key],
                           caller_key=key, cache=CacheControl(skip_read=True),
                           request_id=f"contract-handle-{priority.label}-{key}")
    resp = await ingress.infer(req)
    assert (resp.model, resp.version, resp.degraded) == (MODEL, VERSION, False)
    assert (resp.caller, resp.caller_verified) == (CALLERS[key], True)
    _assert_crossed(host, runs, priority, CALLERS[key], req.request_id)
    _assert_arrived(_only_call(worker, before), priority, deadline_ms)
    doc = await _call_log_line(Path(ingress.settings.call_log.path), req.request_id)
    _assert_logged(doc, priority, CALLERS[key])
