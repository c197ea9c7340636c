"""Small CPU chunks run on the worker's loop thread (no thread hop), under the rules of
``DeviceSpec.inline_ms``: measured on the device thread first, never again after a stall, and
with ``inline_bounded_only`` (the ingress's pool) only for graphs proven bounded."""

import threading
import time

import pytest
import torch
from torch import nn

from common.fallback_types import RequestExpired
from policies.estimates import ChunkCost
from policies.inline import ONE_THREAD_BELOW_S
from policies.priority import Priority
from pool import ModelKey
from pool._private.worker import INLINE_AFTER_RUNS, DeviceWorker
from pool.device import DeviceSpec
from tests.support.pool import config

KEY = ModelKey("probe", "1")


class Probe(nn.Module):
    """Records the thread and torch thread count of every forward; can stall (sleep) or burn
    CPU on demand."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(16, 4)
        self.seen: list[tuple[str, int]] = []
        self.stall_s = 0.0
        self.burn_s = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((threading.current_thread().name, torch.get_num_threads()))
        if self.stall_s:
            time.sleep(self.stall_s)
        cpu0 = time.thread_time()
        while time.thread_time() - cpu0 < self.burn_s:
            pass
        return self.lin(x)


@pytest.fixture
async def probe_worker():
    made = []

    async def _make(inline_ms: float, threads: int = 1, *, bounded_only: bool = False,
                    module: nn.Module | None = None):
        w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20, threads=threads,
                                    inline_ms=inline_ms, inline_bounded_only=bounded_only))
        probe = Probe()
        await w.add_model(KEY, config("probe"), lambda: module or probe)
        probe.seen.clear()  # warm-up passes
        made.append(w)
        return w, probe

    yield _make
    for w in made:
        await w.close()


def _on_device_thread(seen) -> list[bool]:
    return [name.startswith("timeshare-") for name, _ in seen]


async def test_a_small_model_runs_inline_after_its_measured_thread_runs(probe_worker):
    w, probe = await probe_worker(inline_ms=50.0)
    # One row a request, so each request is one chunk: the pool sizes chunks by the measured
    # cost per row, and a cold first measurement (2 ms a row) split 2-row requests in two.
    x = torch.randn(1, 16)
    for _ in range(INLINE_AFTER_RUNS + 4):
        r = await w.infer(KEY, {"x": x})
        # Equal to float32 precision, not bit for bit: the same matmul over a differently
        # aligned copy of the rows may round its last bit differently (seen: 1.2e-7).
        torch.testing.assert_close(r.outputs["y"], probe.lin(x).detach())
    assert _on_device_thread(probe.seen) == [True] * INLINE_AFTER_RUNS + [False] * 4
    assert w.status()["inline_chunks"] == 4


async def test_a_stalling_model_never_runs_inline_again(probe_worker):
    w, probe = await probe_worker(inline_ms=5.0)  # a stall is a chunk over 50 ms
    x = torch.randn(1, 16)
    for _ in range(INLINE_AFTER_RUNS + 1):
        await w.infer(KEY, {"x": x})
    assert _on_device_thread(probe.seen)[-1] is False  # qualified, ran inline
    probe.stall_s = 0.08
    await w.infer(KEY, {"x": x})  # stalls once inline
    probe.stall_s = 0.0
    probe.seen.clear()
    for _ in range(2000):  # until the cost estimate is back under inline_ms (5 ms)
        await w.infer(KEY, {"x": x})
        if w.queues.models[KEY].ewma_row_s * 1e3 < 5.0:
            break
    else:
        raise AssertionError("the cost estimate never fell back under inline_ms")
    assert all(_on_device_thread(probe.seen))  # disqualified for good
    assert "over 10x inline_ms" in w.status()["not_inline"]["probe@1"]


async def test_bounded_only_keeps_python_code_off_the_loop(probe_worker):
    """The ingress's pool: an eager model (here one that could hang on a value) never runs on
    the loop, however cheap it measured, and the status says why."""
    w, probe = await probe_worker(inline_ms=50.0, bounded_only=True)
    for _ in range(INLINE_AFTER_RUNS + 4):
        await w.infer(KEY, {"x": torch.randn(1, 16)})
    assert all(_on_device_thread(probe.seen)) and w.status()["inline_chunks"] == 0
    assert "runs Python code" in w.status()["not_inline"]["probe@1"]


async def test_bounded_only_runs_a_scripted_graph_inline(probe_worker):
    torch.manual_seed(0)
    lin = nn.Linear(16, 4).eval()
    w, _ = await probe_worker(inline_ms=50.0, bounded_only=True, module=torch.jit.script(lin))
    x = torch.randn(1, 16)  # one chunk a request (see above)
    for _ in range(INLINE_AFTER_RUNS + 4):
        r = await w.infer(KEY, {"x": x})
        torch.testing.assert_close(r.outputs["y"], lin(x).detach())  # (as above)
    assert w.status()["inline_chunks"] == 4 and w.status()["not_inline"] == {}


async def test_a_bounded_graph_is_judged_by_its_cpu_not_the_threads_waits(probe_worker):
    """The device thread's wall time holds its waits for the GIL and the cores: behind a busy
    ingress loop it read 0.3 ms a row for a forward of a few µs, and that estimate kept every
    chunk on the thread. A graph proven bounded cannot sleep, so the inline rule reads the
    forward's CPU per row instead."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 4).eval()
    w, _ = await probe_worker(inline_ms=1.0, bounded_only=True, module=torch.jit.script(lin))
    x = torch.randn(1, 16)
    for _ in range(INLINE_AFTER_RUNS):
        await w.infer(KEY, {"x": x})
    entry = w.queues.models[KEY]
    assert entry.cpu_cost is not None and entry.cpu_cost.estimate_s(1) < 1e-3
    entry.ewma_row_s = 0.3  # what a contended device thread measured: 300x inline_ms
    await w.infer(KEY, {"x": x})
    assert w.status()["inline_chunks"] == 1


async def test_a_mostly_fixed_forward_keeps_larger_chunks_inline(probe_worker):
    """The inline rule reads a chunk's CPU as a fixed part plus a part per row: after a run of
    one-row chunks a 12-row chunk of a forward that costs about the same whatever its rows
    stays on the loop (a cost per row read it at over 2 ms, over the ingress's 1 ms, and sent it
    to the device thread: test_chunk_cost.py)."""
    torch.manual_seed(0)
    lin = nn.Linear(16, 4).eval()
    w, _ = await probe_worker(inline_ms=1.0, bounded_only=True, module=torch.jit.script(lin))
    for _ in range(INLINE_AFTER_RUNS):
        await w.infer(KEY, {"x": torch.randn(1, 16)})
    entry = w.queues.models[KEY]
    cost = ChunkCost.first(rows=12, cost_s=350e-6)  # what a busy host measured
    for rows, cost_s in [(12, 350e-6)] * 9 + [(1, 300e-6)] * 15:
        cost.observe(rows=rows, cost_s=cost_s)
    assert 12 * cost.cost_s / cost.rows > 2e-3  # even the mean cost per row reads it dear
    entry.cpu_cost = cost
    x = torch.randn(12, 16)
    r = await w.infer(KEY, {"x": x})
    torch.testing.assert_close(r.outputs["y"], lin(x).detach())
    assert entry.thread_runs == INLINE_AFTER_RUNS  # (the pool may cut the rows in chunks)
    assert w.status()["inline_chunks"] >= 1


async def test_an_unproven_model_is_judged_by_its_wall_time(probe_worker):
    """Without ``inline_bounded_only`` a model may sleep (here 20 ms on almost no CPU): its
    wall time, over ``inline_ms``, keeps it on the device thread."""
    w, probe = await probe_worker(inline_ms=5.0)
    probe.stall_s = 0.02
    for _ in range(INLINE_AFTER_RUNS + 3):
        await w.infer(KEY, {"x": torch.randn(1, 16)})
    entry = w.queues.models[KEY]
    assert entry.cpu_cost is not None
    assert entry.cpu_cost.estimate_s(1) < 0.005 < entry.ewma_row_s
    assert all(_on_device_thread(probe.seen)) and w.status()["inline_chunks"] == 0


async def test_bounded_only_runs_an_onnx_graph_inline(probe_worker):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from pool._private.onnx_format import OnnxModule

    weight = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
        initializer=[numpy_helper.from_array(weight, "w")])
    module = OnnxModule(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    w, _ = await probe_worker(inline_ms=50.0, bounded_only=True, module=module)
    x = torch.randn(1, 16)  # one chunk a request (see above)
    for _ in range(INLINE_AFTER_RUNS + 4):
        r = await w.infer(KEY, {"x": x})
        assert torch.allclose(r.outputs["y"], x @ torch.from_numpy(weight), atol=1e-5)
    assert w.status()["inline_chunks"] == 4 and w.status()["not_inline"] == {}


async def test_inline_off_and_the_callers_torch_threads_restored(probe_worker):
    w, probe = await probe_worker(inline_ms=0.0)
    for _ in range(INLINE_AFTER_RUNS + 3):
        await w.infer(KEY, {"x": torch.randn(1, 16)})
    assert all(_on_device_thread(probe.seen)) and w.status()["inline_chunks"] == 0

    # three distinct counts: the device thread's (2), the loop thread's own (3), and a small
    # chunk's (1, wherever it runs: it would only wait on torch's OpenMP pool)
    w2, probe2 = await probe_worker(inline_ms=50.0, threads=2)
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        for _ in range(INLINE_AFTER_RUNS + 2):
            await w2.infer(KEY, {"x": torch.randn(1, 16)})
        assert torch.get_num_threads() == 3  # the loop thread's own setting is untouched
    finally:
        torch.set_num_threads(before)
    on_thread = [n for (name, n) in probe2.seen if name.startswith("timeshare-")]
    inline = [n for (name, n) in probe2.seen if not name.startswith("timeshare-")]
    # the first chunk is unmeasured (the cold estimate, 2 ms a row): the device's count
    assert on_thread == [2] + [1] * (INLINE_AFTER_RUNS - 1) and inline == [1, 1]


async def test_a_chunk_with_cpu_to_share_keeps_the_devices_threads(probe_worker):
    """Over ONE_THREAD_BELOW_S of measured CPU a chunk runs with the device's intra-op threads;
    a model that sleeps as long but uses no CPU gets one."""
    w, probe = await probe_worker(inline_ms=0.0, threads=2)
    probe.burn_s = 2 * ONE_THREAD_BELOW_S
    for _ in range(4):
        await w.infer(KEY, {"x": torch.randn(1, 16)})
    assert [n for _, n in probe.seen] == [2, 2, 2, 2]

    w2, sleeper = await probe_worker(inline_ms=0.0, threads=2)
    sleeper.stall_s = 2 * ONE_THREAD_BELOW_S
    for _ in range(4):
        await w2.infer(KEY, {"x": torch.randn(1, 16)})
    assert [n for _, n in sleeper.seen] == [2, 1, 1, 1]


def test_negative_inline_ms_is_rejected():
    with pytest.raises(ValueError, match="inline_ms must be >= 0, got -1"):
        DeviceSpec(kind="cpu", memory_budget_bytes=1024, inline_ms=-1)



async def test_requests_arriving_in_one_tick_share_one_inline_forward(probe_worker):
    """Concurrent arrivals at an idle inline device wait for their loop tick and run as one
    batch (policies.inline); each still gets its own rows back."""
    import asyncio

    w, probe = await probe_worker(inline_ms=50.0)
    x = torch.randn(1, 16)
    for _ in range(INLINE_AFTER_RUNS + 3):  # measured on the device thread first
        await w.infer(KEY, {"x": x})
    probe.seen.clear()
    rows = [torch.randn(1, 16) for _ in range(8)]
    # Realtime: batches run whole. An interactive batch is cut into 2 ms chunks by the measured
    # cost per row, and on a slow or busy host (a row measured above 0.25 ms, Python's overhead
    # included) the eight rows became two chunks, which is chunking, not what this tests.
    out = await asyncio.gather(*(w.infer(KEY, {"x": r}, priority=Priority.REALTIME)
                                 for r in rows))
    assert len(probe.seen) == 1 and _on_device_thread(probe.seen) == [False], probe.seen
    for r, o in zip(rows, out, strict=True):
        torch.testing.assert_close(o.outputs["y"], probe.lin(r).detach())


async def test_a_lone_caller_stops_paying_for_the_tick_and_concurrency_resumes_it(
        probe_worker):
    import asyncio

    from policies.inline import LONE_TICKS

    w, probe = await probe_worker(inline_ms=50.0)
    x = torch.randn(1, 16)
    for _ in range(INLINE_AFTER_RUNS + LONE_TICKS + 2):  # one caller: one request a tick
        await w.infer(KEY, {"x": x})
        await asyncio.sleep(0)  # its next request comes in a later tick (over a network)
    gather = w._gather
    assert gather is not None and gather.lone >= LONE_TICKS
    probe.seen.clear()
    await asyncio.gather(*(w.infer(KEY, {"x": x}) for _ in range(5)))
    assert len(probe.seen) == 2  # the first ran at once; the rest of its tick shared one
    assert gather.lone == 0
    probe.seen.clear()
    await asyncio.gather(*(w.infer(KEY, {"x": x}) for _ in range(5)))
    assert len(probe.seen) == 1


async def test_a_chunk_that_finds_the_thread_busy_waits_for_it_and_runs_inline(probe_worker):
    """policies.inline.waits_for_the_thread: requests for an inline model that arrive while
    another model's batch runs on the device thread do not follow it there (where the arrivals
    behind them would follow too); they wait for it and run inline, as one batch."""
    import asyncio

    w, probe = await probe_worker(inline_ms=50.0)
    x = torch.randn(1, 16)
    for _ in range(INLINE_AFTER_RUNS + 1):
        await w.infer(KEY, {"x": x})
    assert _on_device_thread(probe.seen)[-1] is False  # qualified, ran inline
    slow = Probe()
    slow.stall_s = 0.25  # a model not yet measured: its batches run on the device thread
    slow_key = ModelKey("slow", "1")
    await w.add_model(slow_key, config("slow"), lambda: slow)
    probe.seen.clear()
    slow.seen.clear()

    async def later(delay_s: float):
        await asyncio.sleep(delay_s)
        return await w.infer(KEY, {"x": x})

    busy = asyncio.ensure_future(w.infer(slow_key, {"x": x}))
    waiting = [asyncio.ensure_future(later(0.01 * (i + 1))) for i in range(3)]
    await asyncio.sleep(0.05)
    assert w._held and not busy.done()
    # While a chunk waits, an arrival is still judged on arrival: one past its deadline is
    # refused now, not when the thread's batch is done.
    with pytest.raises(RequestExpired):
        await w.infer(KEY, {"x": x}, deadline=w._clock() - 1.0)
    assert not busy.done()
    out = await asyncio.gather(*waiting)
    await busy
    assert _on_device_thread(slow.seen) == [True]
    assert _on_device_thread(probe.seen) == [False], probe.seen  # one inline forward
    assert w.status()["inline_waits"] >= 1
    for o in out:
        torch.testing.assert_close(o.outputs["y"], probe.lin(x).detach())


async def test_an_inline_chunk_runs_on_one_thread_whatever_its_estimate(probe_worker):
    """policies.inline.INLINE_THREADS: a chunk estimated over ONE_THREAD_BELOW_S of CPU takes
    the device's threads on the device thread, but one when it runs inline on the loop."""
    w, probe = await probe_worker(inline_ms=50.0, threads=2)
    probe.burn_s = 2 * ONE_THREAD_BELOW_S
    for _ in range(INLINE_AFTER_RUNS + 2):
        await w.infer(KEY, {"x": torch.randn(1, 16)})
    assert _on_device_thread(probe.seen) == [True] * INLINE_AFTER_RUNS + [False] * 2
    assert [n for _, n in probe.seen] == [2] * INLINE_AFTER_RUNS + [1] * 2
