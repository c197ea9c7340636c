"""The worker's arrival shortcut (``SchedulingPolicy.decide_arrival``) keeps adaptive batching:
an arrival alone on an idle device waits for a batch when another arrival is expected within
``batch_wait_ms``, and runs at once when none is (a lone caller on a quiet model)."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from policies.priority import Priority
from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.device import DeviceSpec
from tests.support.pool import Loader, key

pytestmark = pytest.mark.asyncio


def _config(wait_ms: float) -> ModelConfig:
    return ModelConfig(name="m0", inputs=[{"name": "x", "dtype": "FP32", "shape": [16]}],
                       outputs=[{"name": "y", "dtype": "FP32", "shape": [4]}],
                       max_batch_size=8, batch_wait_ms=wait_ms)


async def _worker(wait_ms: float) -> DeviceWorker:
    w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20, inline_ms=0.0))
    await w.add_model(key(0), _config(wait_ms), Loader(0).build)
    return w


async def _stream(w: DeviceWorker, x: torch.Tensor, n: int) -> list:
    futs = []
    for _ in range(n):
        # realtime: whole batches (the CPU stand-in chunks other classes by time)
        futs.append(asyncio.ensure_future(w.infer(key(0), {"x": x}, priority=Priority.REALTIME)))
        await asyncio.sleep(0.001)
    return await asyncio.gather(*futs)


async def test_close_arrivals_form_one_batch_and_a_lone_one_runs_at_once():
    w = await _worker(wait_ms=500.0)
    x = torch.randn(1, 16)
    try:
        # a lone caller on a quiet model: no other arrival expected, so no wait
        t0 = time.monotonic()
        alone = await w.infer(key(0), {"x": x})
        assert alone.batch_size == 1 and time.monotonic() - t0 < 0.25  # no 500 ms wait
        # a stream of arrivals 1 ms apart: the model's typical gap is now far under the wait,
        # so the next arrival alone on the idle device waits for the ones after it
        await _stream(w, x, 12)
        results = await _stream(w, x, 3)
        # the first arrival, alone on the idle device, waited: all three ran as one batch
        assert [r.batch_size for r in results] == [3, 3, 3]
    finally:
        await w.close()
