"""The worker with several batches in flight, as on CUDA, on the CPU stand-in.

A ``HeldExecutor`` (a real ``DeviceExecutor`` subclass) keeps each launched batch until the test
completes it, up to ``per_class`` per class: the worker's launch, completion, eviction and
retry logic runs exactly as it does over the CUDA executor's streams, in an order the test
chooses.
"""

import asyncio

import pytest
import torch
from torch import nn

from policies.priority import Priority
from pool import ModelKey
from pool._private.chunk import Batch, run_on_cpu
from pool._private.executor import DeviceExecutor
from pool._private.residency import Residency
from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory

R, I, G = Priority.REALTIME, Priority.INTERACTIVE, Priority.BACKGROUND
MODEL_BYTES = 5 * 1024


class HeldExecutor(DeviceExecutor):
    """Batches wait in ``held`` until :meth:`finish` runs them (forward on the CPU)."""

    def __init__(self, device, tiers: Residency, on_done, *, per_class: int = 2,
                 oom_once: set[str] | None = None) -> None:
        super().__init__(on_done)
        self.tiers = tiers
        self.per_class = per_class
        self.held: list[Batch] = []
        self.oom_once = set(oom_once or ())

    def has_room(self, priority: Priority) -> bool:
        return sum(1 for b in self.held if b.priority == priority) < self.per_class

    def _submit(self, b: Batch) -> None:
        self.held.append(b)

    async def call(self, fn, *args):
        return fn(*args)

    def close(self) -> None:
        self.held.clear()

    def finish(self, b: Batch) -> None:
        self.held.remove(b)
        if b.name in self.oom_once:
            self.oom_once.discard(b.name)
            b.error = torch.cuda.OutOfMemoryError("simulated: activations did not fit")
        else:
            run_on_cpu(b, self.tiers)
        self._complete(b)


def config(name, max_batch=64):
    return ModelConfig(name=name, inputs=[{"name": "x", "dtype": "FP32", "shape": [16]}],
                       outputs=[{"name": "y", "dtype": "FP32", "shape": [4]}],
                       max_batch_size=max_batch, batch_wait_ms=0)


def build(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).eval()


def key(i):
    return ModelKey(f"m{i}", "1")


@pytest.fixture
async def held():
    made = []

    async def _make(n_models, fit, **kw):
        ex: list[HeldExecutor] = []

        def factory(device, tiers, on_done):
            ex.append(HeldExecutor(device, tiers, on_done, **kw))
            return ex[0]

        w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=fit * 6 * 1024,
                                    inline_ms=0), executor=factory)
        made.append(w)
        for i in range(n_models):
            await w.add_model(key(i), config(f"m{i}"), lambda i=i: build(i))
        return w, ex[0]

    yield _make
    for w in made:
        await w.close()
        assert w._timer is None or w._timer.cancelled()


async def settle():
    for _ in range(3):
        await asyncio.sleep(0)


def expected(i, x):
    with torch.inference_mode():
        return build(i)(x)


async def test_batches_of_two_classes_are_in_flight_together_and_answered_out_of_order(held):
    w, ex = await held(2, fit=2)
    x = torch.randn(3, 16)
    bg = asyncio.ensure_future(w.infer(key(0), {"x": x}, priority=G))
    rt = asyncio.ensure_future(w.infer(key(1), {"x": x}, priority=R))
    await settle()
    assert [b.priority for b in ex.held] == [G, R]  # both launched, neither waited
    ex.finish(ex.held[1])  # the realtime batch completes first
    await settle()
    assert rt.done() and not bg.done()
    assert torch.allclose(rt.result().outputs["y"], expected(1, x), atol=1e-6)
    ex.finish(ex.held[0])
    assert torch.allclose((await bg).outputs["y"], expected(0, x), atol=1e-6)


async def test_a_model_with_a_batch_in_flight_is_never_evicted_the_swap_waits(held):
    w, ex = await held(3, fit=2)
    x = torch.randn(2, 16)
    running = [asyncio.ensure_future(w.infer(key(i), {"x": x})) for i in (0, 1)]
    await settle()
    assert len(ex.held) == 2
    third = asyncio.ensure_future(w.infer(key(2), {"x": x}, priority=R))
    await settle()
    # m2 needs the room of a model whose batch is in flight: it waits, it is not refused
    assert not third.done() and len(ex.held) == 2
    assert sorted(w.status()["resident"]) == ["m0@1", "m1@1"]
    ex.finish(ex.held[0])
    await settle()
    assert [b.name for b in ex.held] == ["m1@1", "m2@1"]  # swapped in over the finished one
    for b in list(ex.held):
        ex.finish(b)
    for i, f in enumerate([*running, third]):
        assert torch.allclose((await f).outputs["y"], expected(i, x), atol=1e-6)


async def test_a_split_request_gets_its_rows_in_order_whatever_order_its_batches_finish(held):
    w, ex = await held(1, fit=1)
    entry = w.queues.models[key(0)]
    entry.config = config("m0", max_batch=4)  # 10 rows: batches of 4, 4 and 2
    x = torch.randn(10, 16)
    fut = asyncio.ensure_future(w.infer(key(0), {"x": x}, priority=R))
    await settle()
    assert [b.rows for b in ex.held] == [4, 4]  # two in flight: the class's bound
    ex.finish(ex.held[1])
    await settle()
    assert [b.rows for b in ex.held] == [4, 2]
    ex.finish(ex.held[1])
    ex.finish(ex.held[0])
    out = (await fut).outputs["y"]
    assert torch.allclose(out, expected(0, x), atol=1e-6)


async def test_out_of_memory_in_flight_evicts_idle_models_and_runs_the_batch_once_more(held):
    w, ex = await held(3, fit=3, oom_once={"m0@1"})
    x = torch.randn(2, 16)
    fut = asyncio.ensure_future(w.infer(key(0), {"x": x}))
    await settle()
    ex.finish(ex.held[0])  # out of memory: the worker evicts m1, m2 and relaunches
    await settle()
    assert len(ex.held) == 1 and ex.held[0].retried
    assert w.status()["resident"] == ["m0@1"]
    ex.finish(ex.held[0])
    assert torch.allclose((await fut).outputs["y"], expected(0, x), atol=1e-6)


async def test_out_of_memory_twice_hands_the_requests_device_out_of_memory(held):
    w, ex = await held(1, fit=1, oom_once={"m0@1"})
    x = torch.randn(2, 16)
    fut = asyncio.ensure_future(w.infer(key(0), {"x": x}))
    await settle()
    b = ex.held[0]
    ex.finish(b)
    await settle()
    ex.oom_once.add("m0@1")
    ex.finish(ex.held[0])
    with pytest.raises(DeviceOutOfMemory):
        await fut
    later = asyncio.ensure_future(w.infer(key(0), {"x": x}))  # and it serves afterwards
    await settle()
    ex.finish(ex.held[0])
    assert torch.allclose((await later).outputs["y"], expected(0, x), atol=1e-6)


async def test_a_model_removed_with_a_batch_in_flight_is_freed_when_that_batch_is_done(held):
    w, ex = await held(2, fit=2)
    x = torch.randn(2, 16)
    fut = asyncio.ensure_future(w.infer(key(0), {"x": x}))
    await settle()
    await w.remove_model(key(0))
    assert "m0@1" in w.status()["resident"]  # its region is still read by the batch
    ex.finish(ex.held[0])
    await settle()
    assert "m0@1" not in w.status()["resident"]
    assert fut.done()  # answered (unloaded) rather than left hanging
