"""The CPU device thread keeps the next batch at hand (``ThreadExecutor``, two in flight).

With one batch in flight, each completion went back to the event loop, which then decided and
launched the next: behind a busy loop the device idled about 1 ms per batch. Now the next batch
waits on the device side, the thread takes the most urgent waiting batch first, and a batch
more urgent than every waiting one takes an extra slot.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import torch
from torch import nn

from common.fallback_types import DeadlineTooShort, RequestExpired
from policies.priority import Priority
from pool import ModelKey
from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.device import DeviceSpec

KEY = ModelKey("gated", "1")


class Gated(nn.Module):
    """Records each batch's first value, in the order the device runs them; blocks while
    ``gate`` is clear."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.order: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.gate.wait(timeout=10.0):
            raise TimeoutError("the test never opened the gate")
        self.order.append(int(x[0, 0]))
        return x * 2.0


@pytest.fixture
async def gated():
    # inline_ms=0: every batch on the device thread, none on the loop
    worker = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20, inline_ms=0))
    model = Gated().eval()
    cfg = ModelConfig(name=KEY.name, inputs=[{"name": "x", "dtype": "FP32", "shape": [1]}],
                      outputs=[{"name": "y", "dtype": "FP32", "shape": [1]}],
                      max_batch_size=1, batch_wait_ms=0)
    model.gate.set()
    await worker.add_model(KEY, cfg, lambda: model)
    model.gate.clear()
    model.order.clear()
    try:
        yield worker, model
    finally:
        model.gate.set()
        await worker.close()


def _call(worker: DeviceWorker, tag: int, priority: Priority) -> asyncio.Task:
    return asyncio.create_task(worker.infer(KEY, {"x": torch.full((1, 1), float(tag))},
                                            priority=priority, deadline=None))


async def _until(cond, timeout_s: float = 5.0) -> None:
    stop = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < stop, "timed out"
        await asyncio.sleep(0.001)


async def test_more_urgent_work_displaces_the_waiting_batch_which_is_queued_again(gated):
    worker, model = gated
    ex = worker.executor
    first = _call(worker, 1, Priority.BATCH)
    await _until(lambda: ex.in_flight == 1)
    waiting = _call(worker, 2, Priority.BATCH)
    await _until(lambda: ex.in_flight == 2)  # launched behind the running one
    stats = worker.routing_stats()  # the batch waiting there counts as queued
    assert stats.queue_delay_s[Priority.BATCH] > 0 and stats.queue_depth[Priority.BATCH] == 1
    assert worker.routing_stats().queue_delay_s[Priority.REALTIME] == 0  # it would yield
    interactive = _call(worker, 3, Priority.INTERACTIVE)
    await _until(lambda: worker.requeued == 1)  # took the batch's place; that one is queued
    realtime = _call(worker, 4, Priority.REALTIME)
    await _until(lambda: worker.requeued == 2)
    assert ex.in_flight == 2
    model.gate.set()
    outs = await asyncio.gather(first, waiting, interactive, realtime)
    assert model.order == [1, 4, 3, 2]  # by class, whatever the launch order
    assert [float(o.outputs["y"][0, 0]) for o in outs] == [2.0, 4.0, 6.0, 8.0]
    assert worker.status()["requeued"] == 2


async def test_a_waiting_batch_whose_deadline_passed_is_not_run(gated):
    worker, model = gated
    first = _call(worker, 1, Priority.INTERACTIVE)
    await _until(lambda: worker.executor.in_flight == 1)
    late = asyncio.create_task(worker.infer(KEY, {"x": torch.full((1, 1), 2.0)},
                                            deadline=time.monotonic() + 0.05))
    await _until(lambda: worker.executor.in_flight == 2)
    assert worker.routing_stats().queue_depth[Priority.INTERACTIVE] == 1
    await asyncio.sleep(0.1)  # its deadline passes while the first one runs
    model.gate.set()
    await first
    with pytest.raises(RequestExpired) as refused:
        await late
    assert type(refused.value) is RequestExpired  # the queue ahead refused it, not its deadline
    assert model.order == [1]  # never run
    assert worker.expired == 1
    assert worker.routing_stats().queue_depth == (0, 0, 0, 0)


async def test_a_batch_that_arrived_at_an_idle_device_and_missed_says_its_deadline_was_short(
        gated):
    """Nothing was queued or in flight when it arrived, and it launched alone: what made it
    late was its own work and the pool's fixed costs (here, the device thread held up by
    something that is not a batch), so the refusal is the caller's ``DeadlineTooShort`` (the
    chain's 504), not a refusal for load (503)."""
    worker, model = gated
    model.gate.set()
    held = threading.Event()
    busy = asyncio.ensure_future(worker.executor.call(held.wait, 10.0))  # not a batch
    late = asyncio.create_task(worker.infer(KEY, {"x": torch.full((1, 1), 2.0)},
                                            deadline=time.monotonic() + 0.05))
    await _until(lambda: worker.executor.in_flight == 1)
    await asyncio.sleep(0.1)  # its deadline passes before the thread can start it
    held.set()
    await busy
    with pytest.raises(DeadlineTooShort):
        await late
    assert model.order == []  # never run
    assert worker.expired == 1


async def test_a_completion_runs_straight_into_the_next_batch_while_the_loop_is_busy(gated):
    worker, model = gated
    a = _call(worker, 1, Priority.INTERACTIVE)
    await _until(lambda: worker.executor.in_flight == 1)
    b = _call(worker, 2, Priority.INTERACTIVE)
    await _until(lambda: worker.executor.in_flight == 2)
    model.gate.set()
    time.sleep(0.3)  # the loop is busy: no completion is handled, no decision taken
    assert model.order == [1, 2]  # the second ran all the same
    await asyncio.gather(a, b)
