"""The real DeviceWorker on CPU with a budget-limited arena and tiny real torch models."""

import asyncio
import threading

import pytest
import torch
from torch import nn

from common.fallback_types import RequestExpired
from policies.priority import Priority
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.errors import DeviceOutOfMemory, ModelLoadError, ModelNotLoaded
from tests.support.pool import HIDDEN, MODEL_BYTES, Loader, config, key

R, I, G = Priority.REALTIME, Priority.INTERACTIVE, Priority.BACKGROUND


@pytest.fixture
async def make_worker():
    workers = []

    def _make(models_fit=2, host_budget=None, chunk=16, scheduler="priority"):
        w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=models_fit * 6 * 1024,
                                    host_budget_bytes=host_budget, chunk_size=chunk),
                         scheduler=scheduler)
        workers.append(w)
        return w

    yield _make
    for w in workers:
        await w.close()
        assert w._timer is None or w._timer.cancelled()  # no leaked wake-up timer
        assert not w.queues.active or all(p.future.done() for _, e in w.queues.active.items()
                                          for p in e.queue)  # nothing left unanswered


async def add(w, n, script=False):
    loaders = [Loader(i, script) for i in range(n)]
    for i, ld in enumerate(loaders):
        await w.add_model(key(i), config(f"m{i}"), ld)
    return loaders


@pytest.mark.parametrize("script", [False, True], ids=["eager", "torchscript"])
async def test_more_models_than_fit_swap_through_the_arena_with_correct_outputs(
        make_worker, script):
    w = make_worker(models_fit=2)
    loaders = await add(w, 5, script)
    x = torch.randn(8, 16)
    for _ in range(2):
        for i, ld in enumerate(loaders):
            r = await w.infer(key(i), {"x": x})
            assert torch.allclose(r.outputs["y"], ld.build()(x), atol=1e-6)
            assert len(w.status()["resident"]) <= 2
    st = w.status()
    assert st["swaps"]["count"] >= 8 and st["swaps"]["bytes"] >= 8 * MODEL_BYTES
    assert st["swaps"]["disk_loads"] == 0  # host tier unbounded: disk read once per model
    assert all(ld.calls == 1 for ld in loaders)
    assert st["memory"]["used_bytes"] <= st["memory"]["total_bytes"]
    assert st["host_tier"] == sorted(str(key(i)) for i in range(5))


async def test_bounded_host_tier_goes_back_to_disk(make_worker):
    w = make_worker(models_fit=1, host_budget=2 * 6 * 1024)
    loaders = await add(w, 4)
    assert len(w.status()["host_tier"]) <= 2
    x = torch.randn(3, 16)
    for i, ld in enumerate(loaders):
        r = await w.infer(key(i), {"x": x})
        assert torch.allclose(r.outputs["y"], ld.build()(x), atol=1e-6)
    assert w.status()["swaps"]["disk_loads"] >= 1
    assert sum(ld.calls for ld in loaders) == 4 + w.status()["swaps"]["disk_loads"]


async def test_realtime_waits_one_chunk_and_evicts_busy_background_model(make_worker):
    w = make_worker(models_fit=1, chunk=16)
    loaders = await add(w, 2)
    big = torch.randn(64 * 4, 16)
    bg = [asyncio.create_task(w.infer(key(0), {"x": big[i * 64:(i + 1) * 64]}, priority=G))
          for i in range(4)]
    while w.chunks < 1:
        await asyncio.sleep(0.0005)
    x = torch.randn(2, 16)
    rt = await w.infer(key(1), {"x": x}, priority=R)
    assert torch.allclose(rt.outputs["y"], loaders[1].build()(x), atol=1e-6)
    assert sum(t.done() for t in bg) <= 1  # realtime did not wait for the background queue
    assert w.status()["preemptions"] == 1
    results = await asyncio.gather(*bg)
    for i, r in enumerate(results):  # background resumed after being swapped back in
        assert torch.allclose(r.outputs["y"], loaders[0].build()(big[i * 64:(i + 1) * 64]),
                              atol=1e-6)
    assert w.status()["swaps"]["outs"] >= 2


async def test_fifo_scheduler_makes_realtime_wait_for_whole_background_batches(make_worker):
    w = make_worker(models_fit=2, scheduler="fifo")
    await add(w, 2)
    big = torch.randn(64, 16)
    bg = [asyncio.create_task(w.infer(key(0), {"x": big}, priority=G)) for _ in range(3)]
    while w.chunks < 1:
        await asyncio.sleep(0.0005)
    await w.infer(key(1), {"x": big[:1]}, priority=R)
    assert all(t.done() for t in bg)  # FIFO: everything queued earlier ran first
    await asyncio.gather(*bg)
    assert w.status()["preemptions"] == 0


async def test_past_deadline_is_expired_not_run(make_worker):
    w = make_worker()
    await add(w, 1)
    with pytest.raises(RequestExpired, match="m0@1"):
        await w.infer(key(0), {"x": torch.randn(1, 16)}, deadline=w._clock() - 0.01)
    assert w.status()["expired"] == 1 and w.status()["chunks"] == 0


async def test_status_per_class_has_queue_wait_compute_and_refusals(make_worker):
    w = make_worker()
    await add(w, 1)
    await asyncio.gather(*(w.infer(key(0), {"x": torch.randn(4, 16)}, priority=G)
                           for _ in range(3)))
    await w.infer(key(0), {"x": torch.randn(1, 16)}, priority=R)
    with pytest.raises(RequestExpired):
        await w.infer(key(0), {"x": torch.randn(1, 16)}, priority=Priority.BATCH,
                      deadline=w._clock() - 0.01)
    by = w.status()["classes"]["by_class"]
    assert (by["background"]["requests"], by["background"]["refused"]) == (3, 0)
    assert (by["realtime"]["requests"], by["realtime"]["refused"]) == (1, 0)
    assert (by["batch"]["requests"], by["batch"]["refused"]) == (0, 1)  # refused unrun
    for label in ("realtime", "background"):
        assert by[label]["compute_ms"]["p50"] > 0 and by[label]["rate_per_s"] > 0
        assert by[label]["queue_ms"]["p99"] is not None and by[label]["swap_ms"]["p50"] is not None
    assert by["interactive"]["requests"] == 0 and by["interactive"]["queue_ms"]["p50"] is None


async def test_model_bigger_than_the_device_raises_device_out_of_memory(make_worker):
    w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=2048))
    try:
        await add(w, 1)
        with pytest.raises(DeviceOutOfMemory, match="m0@1 needs"):
            await w.infer(key(0), {"x": torch.randn(1, 16)})
    finally:
        await w.close()


async def test_unknown_and_removed_models(make_worker):
    w = make_worker()
    with pytest.raises(ModelNotLoaded):
        await w.infer(key(9), {"x": torch.randn(1, 16)})
    await add(w, 1)
    assert w.has_model(key(0))
    await w.remove_model(key(0))
    assert not w.has_model(key(0)) and w.status()["resident"] == []
    assert w.status()["memory"]["used_bytes"] == 0


async def test_broken_model_raises_model_load_error(make_worker):
    w = make_worker()

    def broken():
        return nn.Linear(3, 4)  # config says 16 inputs

    with pytest.raises(ModelLoadError, match="m0@1.*warm-up failed"):
        await w.add_model(key(0), config("m0"), broken)
    assert not w.has_model(key(0))


async def test_routing_stats_report_residency_queue_and_memory(make_worker):
    w = make_worker(models_fit=1)
    await add(w, 2)
    s = w.routing_stats()
    assert s.resident == frozenset({"m0@1"}) and s.hosted == frozenset({"m0@1", "m1@1"})
    assert s.memory_total_bytes == 6 * 1024 and 0 < s.memory_free_bytes < 6 * 1024
    assert s.queue_depth == (0, 0, 0, 0)


async def test_time_budgeted_chunks_split_a_batch_and_reassemble_its_rows():
    from policies.scheduling import PrioritySchedulingPolicy

    # A budget far below one row's measured cost: every chunk is a single row.
    w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=2 * 6 * 1024, chunk_size=64),
                     scheduler=PrioritySchedulingPolicy(chunk_ms=1e-6))
    try:
        (ld,) = await add(w, 1)
        x = torch.randn(5, 16)
        r = await w.infer(key(0), {"x": x}, priority=G)
        assert torch.allclose(r.outputs["y"], ld.build()(x), atol=1e-6)
        assert w.chunks == 5
        r = await w.infer(key(0), {"x": x}, priority=R)  # realtime: whole batch, one chunk
        assert w.chunks == 6
        assert w.snapshot().models == ()  # idle models are not described to the policy
    finally:
        await w.close()


class GatedLoader(Loader):
    """A loader whose disk reads after the first wait for ``gate`` (a reload from disk that
    takes as long as the test wants); ``reloading`` is set once such a read has begun."""

    def __init__(self, seed):
        super().__init__(seed)
        self.gate = threading.Event()
        self.reloading = threading.Event()

    def __call__(self):
        if self.calls:
            self.reloading.set()
            if not self.gate.wait(HANG_S):
                raise TimeoutError("the test never opened the gate")
        return super().__call__()


HANG_S = 30.0  # only a hang waits this long


async def _until(flag: threading.Event) -> None:
    """Wait, without blocking the loop, until another thread sets ``flag``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_S
    while not flag.is_set():
        assert loop.time() < deadline, "the condition never came"
        await asyncio.sleep(0.005)


async def test_a_disk_reload_runs_off_the_loop_while_resident_models_serve(make_worker):
    w = make_worker(models_fit=1, host_budget=1 * 6 * 1024)
    slow = GatedLoader(0)
    await w.add_model(key(0), config("m0"), slow)
    await w.add_model(key(1), config("m1"), Loader(1))  # m0's host copy dropped
    x = torch.randn(2, 16)
    await w.infer(key(1), {"x": x})  # m1 resident, m0 evicted: m0 is on disk only
    assert w.status()["host_tier"] == [str(key(1))] and w.status()["resident"] == [str(key(1))]
    cold = asyncio.ensure_future(w.infer(key(0), {"x": x}))
    try:
        await _until(slow.reloading)  # the reload of m0 has started, and holds until told
        r = await asyncio.wait_for(w.infer(key(1), {"x": x}), HANG_S)
        assert not cold.done() and not slow.gate.is_set()  # m1 served during m0's disk read
        assert torch.allclose(r.outputs["y"], Loader(1).build()(x), atol=1e-6)
    finally:
        slow.gate.set()
    out = await cold
    assert torch.allclose(out.outputs["y"], Loader(0).build()(x), atol=1e-6)
    assert w.status()["swaps"]["disk_loads"] == 1


async def test_a_request_waiting_on_a_disk_load_expires_at_its_deadline(make_worker):
    w = make_worker(models_fit=1, host_budget=1 * 6 * 1024)
    slow = GatedLoader(0)
    await w.add_model(key(0), config("m0"), slow)
    await w.add_model(key(1), config("m1"), Loader(1))
    await w.infer(key(1), {"x": torch.randn(1, 16)})  # m0 on disk only
    try:
        with pytest.raises(RequestExpired):
            await asyncio.wait_for(
                w.infer(key(0), {"x": torch.randn(1, 16)}, deadline=w._clock() + 0.2), HANG_S)
        # Refused at its deadline while the load still holds: not after the load.
        assert slow.reloading.is_set() and not slow.gate.is_set()
    finally:
        slow.gate.set()


class ThreadRecorder(nn.Module):
    """A real MLP that records the thread of each forward pass (``log`` shared by its loads)."""

    def __init__(self, seed, log):
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(16, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 4))
        self.log = log

    def forward(self, x):
        import threading

        self.log.append(threading.current_thread().name)
        return self.net(x)


async def test_a_model_reloaded_from_disk_is_warmed_in_its_load_not_in_its_first_chunk(
        make_worker):
    # A fresh TorchScript module optimises its graph on its first passes: run in the first
    # chunk, that held the device thread (and every model queued behind it) for 100+ ms.
    w = make_worker(models_fit=1, host_budget=1 * 6 * 1024)
    log: list[str] = []
    await w.add_model(key(0), config("m0"), lambda: ThreadRecorder(0, log).eval())
    await w.add_model(key(1), config("m1"), Loader(1))  # m0's host copy dropped
    await w.infer(key(1), {"x": torch.randn(2, 16)})  # m0 evicted: on disk only
    log.clear()
    await w.infer(key(0), {"x": torch.randn(2, 16)})  # reloaded from disk, then run
    assert w.status()["swaps"]["disk_loads"] == 1
    warm, first_chunk = log[:-1], log[-1]
    assert len(warm) >= 2 and not any(t.startswith("timeshare-") for t in warm)
    assert first_chunk.startswith("timeshare-")  # the request's own pass, on the device thread


async def test_numpy_rows_come_back_as_numpy_batched_and_split_across_chunks(make_worker):
    """The host's kind (numpy in, numpy out): requests that share a chunk and a request split
    over several chunks get exactly their own rows, as a mixed torch caller does."""
    import numpy as np

    w = make_worker(models_fit=2, chunk=16)
    (ld,) = await add(w, 1)
    net = ld.build()
    xs = [np.random.default_rng(i).standard_normal((n, 16)).astype(np.float32)
          for i, n in enumerate((1, 3, 40, 2))]  # 40 rows: three chunks of at most 16
    t = torch.randn(5, 16)
    results = await asyncio.gather(*[w.infer(key(0), {"x": x}) for x in xs],
                                   w.infer(key(0), {"x": t}))
    for x, r in zip(xs, results[:-1], strict=True):
        assert isinstance(r.outputs["y"], np.ndarray) and r.outputs["y"].shape == (len(x), 4)
        np.testing.assert_allclose(r.outputs["y"], net(torch.from_numpy(x)).detach().numpy(),
                                   atol=1e-6)
    assert isinstance(results[-1].outputs["y"], torch.Tensor)
    assert torch.allclose(results[-1].outputs["y"], net(t), atol=1e-6)
    assert w.chunks >= 3 and max(r.batch_size for r in results) > 1  # shared, and split
