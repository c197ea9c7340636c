"""A model that ran slow once (a hang) is not refused forever on its stale cost estimate.

The worker refuses (expires) a request when its estimated compute cannot finish before the
request's deadline. The estimate only changes when the model runs, so one slow run used to make
every later request with a shorter budget be refused, forever: the model never ran again.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from common.fallback_types import RequestExpired
from policies.estimates import Pace
from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.device import DeviceSpec
from tests.support.clocks import FakeClock
from tests.support.pool import SOMETIMES_SLOW as KEY
from tests.support.pool import SometimesSlow


@pytest.fixture
async def worker_and_model():
    clock = FakeClock()  # frozen unless advanced: deadlines pass only when the test says so
    worker = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20), clock=clock,
                          estimate_ttl_s=2.0)
    model = SometimesSlow().eval()
    cfg = ModelConfig(name=KEY.name, inputs=[{"name": "x", "dtype": "FP32", "shape": [4]}],
                      outputs=[{"name": "y", "dtype": "FP32", "shape": [2]}], batch_wait_ms=0)
    await worker.add_model(KEY, cfg, lambda: model)
    yield worker, model, clock
    await worker.close()


async def _call(worker: DeviceWorker, clock: FakeClock, budget_s: float):
    return await worker.infer(KEY, {"x": torch.ones(1, 4)}, deadline=clock() + budget_s)


async def test_stale_cost_estimate_stops_refusing_and_is_remeasured(worker_and_model):
    worker, model, clock = worker_and_model
    await _call(worker, clock, 10.0)  # normal speed
    model.hang.set()
    await _call(worker, clock, 10.0)  # one slow run: the estimate now exceeds a 20 ms budget
    model.hang.clear()
    # while the estimate is fresh, short-budget work is refused without running
    for _ in range(3):
        with pytest.raises(RequestExpired):
            await _call(worker, clock, 0.02)
    chunks = worker.chunks
    assert worker.expired == 3

    clock.advance(2.5)  # no run for longer than estimate_ttl_s: the estimate is stale
    out = await _call(worker, clock, 0.02)  # runs (the fix: it used to be refused forever)
    assert torch.allclose(out.outputs["y"], model.lin(torch.ones(1, 4)))
    assert worker.chunks == chunks + 1
    # the fresh measurement replaced the slow one: short budgets are served again right away
    for _ in range(3):
        await _call(worker, clock, 0.02)
    assert worker.expired == 3 and worker.chunks == chunks + 4


async def test_slow_model_is_remeasured_at_most_once_per_ttl(worker_and_model):
    worker, model, clock = worker_and_model
    model.hang.set()  # genuinely slow: every run is slow
    await _call(worker, clock, 10.0)
    for _ in range(2):
        for _ in range(3):
            with pytest.raises(RequestExpired):
                await _call(worker, clock, 0.02)
        clock.advance(2.5)
        chunks = worker.chunks
        # one probe runs (too slow for its budget: measured, and the estimate is fresh again)
        await _call(worker, clock, 0.02)
        assert worker.chunks == chunks + 1
    assert worker.expired == 6


async def test_work_that_cannot_make_it_is_refused_on_arrival_while_a_chunk_runs(
        worker_and_model):
    worker, model, clock = worker_and_model
    await _call(worker, clock, 10.0)  # measured at normal speed
    model.hang.set()
    running = asyncio.create_task(_call(worker, clock, 10.0))  # a 0.3 s chunk on the device
    while not worker._running:
        await asyncio.sleep(0.001)
    clock.advance(20.0)  # the running request's own deadline passes during its chunk
    with pytest.raises(RequestExpired):
        await _call(worker, clock, 1e-6)  # cannot make it: refused now, not after the chunk
    assert not running.done()  # the long chunk is still on the device
    out = await running  # and the request in it is answered, not refused mid-run
    assert out.outputs["y"].shape == (1, 2)
    assert worker.expired == 1


async def test_the_published_wait_and_the_snapshot_carry_the_devices_pace(worker_and_model):
    worker, model, clock = worker_and_model
    await _call(worker, clock, 10.0)
    model.hang.set()
    running = asyncio.create_task(_call(worker, clock, 10.0))
    while not worker._running:
        await asyncio.sleep(0.001)
    queued = asyncio.create_task(_call(worker, clock, 10.0))
    await asyncio.sleep(0)
    on_estimate = worker.routing_stats().queue_delay_s
    worker.pace = Pace(wall_s=0.03, work_s=0.01)  # learned: 3x behind its estimates
    assert worker.snapshot().pace == pytest.approx(3.0)
    assert on_estimate[1] > 0
    assert worker.routing_stats().queue_delay_s == pytest.approx(
        tuple(3.0 * d for d in on_estimate))
    model.hang.clear()
    await asyncio.gather(running, queued)


async def test_the_device_time_of_completed_batches_is_counted(worker_and_model):
    """``compute_s`` (status) and ``compute_seconds`` (the counters Prometheus exports as
    ``timeshare_compute_duration_seconds_total``) sum the completed batches' forward time:
    a slow forward counts its whole 0.3 s, a refused request adds nothing."""
    worker, model, clock = worker_and_model
    await _call(worker, clock, 10.0)
    model.hang.set()
    slow = await _call(worker, clock, 10.0)
    with pytest.raises(RequestExpired):  # refused unrun on the slow estimate: no device time
        await _call(worker, clock, 0.02)
    c = worker.counters()
    assert c.batches == worker.chunks == 2
    assert c.compute_seconds >= 0.3 and slow.compute_ms >= 300.0
    assert c.compute_seconds == pytest.approx(worker.compute_s)
    assert worker.status()["compute_s"] == pytest.approx(c.compute_seconds, abs=1e-6)
    assert c.compute_seconds < 0.3 + 0.2  # the fast forward is not counted as a slow one
