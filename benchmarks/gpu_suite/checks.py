"""Correctness of every CUDA path, each pass/fail with its reason (CUDA-only ones skip on CPU).

The swapped-equals-fresh, out-of-memory and leak checks also run on the CPU stand-in (the
out-of-memory there is simulated: the model raises torch's CUDA OOM error while other models
are resident, which exercises the same evict-and-retry code).
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from functools import partial

import torch

from benchmarks.gpu_suite._env import (
    Env,
    check,
    config,
    linear_stack,
    log,
    model_bytes,
    skipped,
)
from benchmarks.gpu_suite.checks_executor import serving_loop_no_sync
from benchmarks.gpu_suite.checks_memory import no_leak, oom_evict_retry
from policies.priority import Priority
from pool._private.device_memory import CudaMemory
from pool._private.residency import Residency
from pool._private.worker import DeviceWorker, ModelKey
from pool.device import DeviceSpec

__all__ = ["CUDA_RESERVE", "run_checks"]

I = Priority.INTERACTIVE
# the suite's activation reserve on CUDA; NVML and torch must agree within it
CUDA_RESERVE = 2 << 30


def _spec(env: Env, budget: int) -> DeviceSpec:
    return DeviceSpec(kind=env.kind, memory_budget_bytes=budget, inline_ms=0)


async def host_tier_pinned(env: Env) -> dict:
    if not env.cuda:
        return skipped()
    tiers = Residency(_spec(env, 64 << 20))
    packed, load_s = await tiers.load(lambda: linear_stack(4 << 20, 512, 0))
    tiers.register("m", lambda: linear_stack(4 << 20, 512, 0), I, packed, load_s)
    await tiers.ensure("m", I, {})
    tiers.swap_out("m")  # back on the host buffer: still the pinned one
    pinned = packed.host is not None and packed.host.is_pinned()
    try:  # what the pinned (caching host) allocator holds, where this torch reports it
        held = torch.cuda.host_memory_stats().get("allocated_bytes.current")
    except Exception:  # noqa: BLE001 - informative only
        held = None
    return check(pinned, "the packed host buffer is page-locked (pinned) memory" if pinned
                 else "host buffer is pageable: swap-in copies would be staged and synchronous",
                 packed_bytes=packed.nbytes, host_tier_counts=tiers.host.used_bytes,
                 pinned_allocator_bytes=held)


async def copy_stream_event(env: Env) -> dict:
    """The copy is enqueued on the copy stream and the compute stream waits on its event: no
    synchronisation of any kind while copying and running (sync debug mode 'error')."""
    if not env.cuda:
        return skipped()
    width = 2048
    cpu_model = linear_stack(256 << 20, width, 3)
    tiers = Residency(_spec(env, 512 << 20))
    packed, load_s = await tiers.load(lambda: copy.deepcopy(cpu_model))
    tiers.register("m", lambda: copy.deepcopy(cpu_model), I, packed, load_s)
    assert tiers.compute_streams is not None
    stream = tiers.compute_streams[I]
    x = torch.randn(8, width, device=env.device)
    torch.cuda.synchronize()
    swap = tiers.reserve("m", I, {})
    assert swap is not None
    calls = {"synchronize": 0}
    real_sync = torch.cuda.synchronize

    def counting_sync(*a, **k):
        calls["synchronize"] += 1
        return real_sync(*a, **k)

    prev = torch.cuda.get_sync_debug_mode()
    torch.cuda.synchronize = counting_sync
    torch.cuda.set_sync_debug_mode("error")
    try:
        host_s = tiers.copy(swap)
        recorded = len(swap.events)  # (``swapped`` below hands the pair back to its pool)
        in_flight = not swap.events[1].query()
        with torch.inference_mode(), torch.cuda.stream(stream):
            y = tiers.module("m")(x)
    finally:
        torch.cuda.set_sync_debug_mode(prev)
        torch.cuda.synchronize = real_sync
    stream.synchronize()
    copy_s = tiers.swapped(swap, host_s) - swap.reserved_s
    fresh = copy.deepcopy(cpu_model).to(env.device)
    env.sync()  # .to() ran on the default stream; the compute stream does not wait for it
    with torch.inference_mode(), torch.cuda.stream(stream):
        ref = fresh(x)
    stream.synchronize()
    equal = torch.equal(y, ref)
    ok = equal and calls["synchronize"] == 0 and recorded == 2
    return check(ok, "copy enqueued on the copy stream, compute waited on its event; no sync "
                 "and the first forward read the copied weights" if ok else
                 f"outputs equal={equal}, synchronize calls={calls['synchronize']}, "
                 f"copy events recorded={recorded} (want 2)",
                 enqueue_ms=round(host_s * 1e3, 3), copy_ms=round(copy_s * 1e3, 3),
                 copy_in_flight_when_copy_returned=in_flight, model_bytes=packed.nbytes)


async def swapped_equals_fresh(env: Env) -> dict:
    width = 512
    nbytes = 8 << 20 if env.cuda else 1 << 20
    models = {s: linear_stack(nbytes, width, s) for s in (0, 1)}
    one = model_bytes(models[0])
    w = DeviceWorker(_spec(env, one + one // 2))
    try:
        for s, m in models.items():
            await w.add_model(ModelKey(f"m{s}", "1"), config(f"m{s}", width),
                              partial(copy.deepcopy, m))
        x = torch.randn(16, width)
        for s in (0, 1, 0, 1, 0):  # every call swaps the other one out
            r = await w.infer(ModelKey(f"m{s}", "1"), {"x": x})
        fresh = copy.deepcopy(models[0]).to(env.device)
        env.sync()  # .to() ran on the default stream; the compute stream does not wait for it
        with torch.inference_mode():
            if w.tiers.compute_streams is not None:
                stream = w.tiers.compute_streams[I]
                with torch.cuda.stream(stream):
                    ref = fresh(x.to(env.device)).cpu()
            else:
                ref = fresh(x)
        swaps = w.status()["swaps"]["count"]
    finally:
        await w.close()
    # Bitwise equality is reported but not required: the swapped weights are views at 64-byte
    # offsets of one region (a fresh model's are separate allocations), and the worker's thread
    # count differs from this one's, either of which may pick another kernel or reduction order.
    y = r.outputs["y"]
    assert isinstance(y, torch.Tensor)  # the worker answers tensors with tensors
    diff = float((y - ref).abs().max())
    bitwise = torch.equal(y, ref)
    ok = torch.allclose(y, ref, rtol=1e-5, atol=1e-5) and swaps >= 5
    return check(ok, f"after {swaps} swaps the outputs equal a fresh copy's (max abs diff "
                 f"{diff:.2e}, bitwise={bitwise})" if ok else
                 f"max abs diff {diff} after {swaps} swaps", max_abs_diff=diff,
                 bitwise_equal=bitwise, swaps=swaps)


async def stream_priorities(env: Env) -> dict:
    if not env.cuda:
        return skipped()
    w = DeviceWorker(_spec(env, 64 << 20))
    try:
        streams = w.tiers.compute_streams
        assert streams is not None
        levels = {p.label: streams[p].priority for p in Priority}
        low, high = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]
        # the worker runs its chunks on the streams that swap-in copies order
        uses_shared = getattr(w.executor, "streams", None) is streams
    finally:
        await w.close()
    ok = (levels["realtime"] == high and levels["background"] == low and high < low
          and levels["realtime"] <= levels["interactive"] <= levels["batch"] and uses_shared)
    return check(ok, "realtime runs on the most urgent stream level, background on the least"
                 if ok else f"levels {levels}, range ({low}, {high}), shared={uses_shared}",
                 levels=levels, priority_range=[low, high])


async def nvml_capacity(env: Env) -> dict:
    if not env.cuda:
        return skipped()
    try:
        import pynvml
    except ImportError as e:
        return check(False, f"nvidia-ml-py missing: {e}")
    pynvml.nvmlInit()
    try:
        props = torch.cuda.get_device_properties(0)
        try:
            h = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{props.uuid}")
        except Exception:  # noqa: BLE001 - UUID lookup unsupported: the first device
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
        info = pynvml.nvmlDeviceGetMemoryInfo(h)
        free_t, total_t = torch.cuda.mem_get_info(0)
    finally:
        pynvml.nvmlShutdown()
    capacity = CudaMemory(env.device).capacity_bytes
    d_total, d_free = abs(int(info.total) - total_t), abs(int(info.free) - free_t)
    ok = d_total <= CUDA_RESERVE and d_free <= CUDA_RESERVE and capacity == total_t
    return check(ok, f"NVML and mem_get_info agree within the {CUDA_RESERVE >> 20} MiB reserve"
                 if ok else "they disagree by more than the reserve",
                 nvml_total=int(info.total), torch_total=total_t, nvml_free=int(info.free),
                 torch_free=free_t, cuda_memory_capacity=capacity, reserve=CUDA_RESERVE)


CheckFn = Callable[[Env], Awaitable[dict]]


async def run_checks(env: Env, extra: dict[str, CheckFn] | None = None) -> dict[str, dict]:
    """Every check in order; a check that raises fails with the exception as its reason."""
    order: dict[str, CheckFn] = {
        "host_tier_pinned": host_tier_pinned,
        "copy_stream_event_no_device_sync": copy_stream_event,
        "swapped_equals_fresh": swapped_equals_fresh,
        "stream_priorities": stream_priorities,
        "nvml_vs_mem_get_info": nvml_capacity,
        "oom_evicts_retries_hands_back": oom_evict_retry,
        "no_leak_1000_swaps": no_leak,
        "serving_loop_no_sync": serving_loop_no_sync,
        **(extra or {}),
    }
    out: dict[str, dict] = {}
    for name, fn in order.items():
        log(f"check {name}")
        try:
            out[name] = await fn(env)
        except Exception as e:  # noqa: BLE001 - a broken check fails itself, not the suite
            out[name] = check(False, f"raised {type(e).__name__}: {e}")
        env.free_cache()
    return out

