"""Capacity: the highest rate each arm serves with goodput >= 0.99, on three zoos, and what
each keeps at twice Timeshare's capacity.

Zoos (CUDA; the CPU stand-in scales them down): 300 x 2 MiB and 100 x 32 MiB models on a
budget that holds about a third of them, and 1,000 x 2 MiB at 10x oversubscription. Zipf(1.1)
popularity, Poisson arrivals, 100 ms deadlines. Arms: ``timeshare`` (``DeviceWorker``) and
``host_ram_pinned`` (the hand-written pinned-LRU loop, ``colocation_arms.PinnedLru``), each
with the same budget and the same traces. On the CPU a third, ``host_path``: the worker
through the CUDA executor's host path (``host_path.LaunchWaitExecutor``), which the CPU
stand-in's own executor never takes.

The rate starts at ``start`` and doubles while goodput (answers within the deadline over
requests) is at least 0.99; two geometric bisections then narrow the step where it fell below.
``capacity_per_s`` is the highest rate that held. Then both arms run at twice Timeshare's
capacity: past saturation a deadline-aware server keeps answering about its capacity in time
(it refuses what it cannot serve, and the refused requests go to their fallbacks), where a
loop that serves everything late collapses. ``goodput_at_2x_over_capacity`` is the answers in
time per second there over Timeshare's capacity.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import partial

import torch
from torch import nn

from benchmarks.colocation import zipf_weights
from benchmarks.gpu_suite._env import Env, config, linear_stack, log, model_bytes
from benchmarks.gpu_suite.colocation_arms import (
    PinnedLru,
    drive,
    make_trace,
    pinned_states,
    summarize,
)
from benchmarks.gpu_suite.host_path import LaunchWaitExecutor
from policies.scheduling import device_scheduling_policy
from pool import ModelKey
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec

__all__ = ["Zoo", "run_capacity"]

GOODPUT_MIN = 0.99


@dataclass(frozen=True, slots=True)
class Zoo:
    name: str
    models: int
    width: int
    layers: int
    oversubscription: float  # total weights / device budget
    start: float  # first rate tried, requests/s
    step_s: float  # seconds of arrivals per rate
    deadline_ms: float
    drain_s: float
    doublings: int = 7
    bisections: int = 2
    zipf: float = 1.1


def zoos(env: Env) -> list[Zoo]:
    if env.cuda:
        return [Zoo("300x2MiB", 300, 512, 2, 3.0, 200, 1.5, 100, 1.0),
                Zoo("100x32MiB", 100, 1024, 8, 3.2, 100, 1.5, 100, 1.0),
                Zoo("1000x2MiB_10x", 1000, 512, 2, 10.0, 100, 1.5, 100, 1.0)]
    if env.quick:
        return [Zoo("30xtiny", 30, 32, 2, 3.0, 20, 0.5, 250, 0.5, doublings=2, bisections=0)]
    return [Zoo("60xsmall", 60, 64, 2, 3.0, 25, 1.0, 250, 0.5, doublings=7, bisections=1),
            Zoo("20xlarger", 20, 256, 4, 3.2, 25, 1.0, 250, 0.5, doublings=7, bisections=1),
            Zoo("200xsmall_10x", 200, 64, 2, 10.0, 25, 1.0, 250, 0.5, doublings=7,
                bisections=1)]


Call = Callable[[int, torch.Tensor, float], Awaitable[object]]


async def _at(z: Zoo, call: Call, rate: float, x: torch.Tensor, seed: int) -> dict:
    trace = make_trace(z.models, rate, z.step_s, zipf_weights(z.models, z.zipf), seed=seed)
    res = summarize(await drive(trace, call, x, z.deadline_ms / 1e3, z.drain_s), z.step_s)
    return {"rate_per_s": round(rate, 1), **res}


async def _capacity(z: Zoo, call: Call, x: torch.Tensor) -> tuple[float | None, list[dict]]:
    curve: list[dict] = []
    held: float | None = None
    fell: float | None = None
    rate = z.start
    for i in range(z.doublings):
        point = await _at(z, call, rate, x, seed=i)
        curve.append(point)
        if point["goodput_share"] < GOODPUT_MIN:
            fell = rate
            break
        held, rate = rate, rate * 2
    for i in range(z.bisections if held is not None and fell is not None else 0):
        assert held is not None and fell is not None
        mid = (held * fell) ** 0.5
        point = await _at(z, call, mid, x, seed=100 + i)
        curve.append(point)
        if point["goodput_share"] < GOODPUT_MIN:
            fell = mid
        else:
            held = mid
    return held, curve


async def _zoo(env: Env, z: Zoo) -> dict:
    nbytes = z.width * z.width * 4 * z.layers
    models: list[nn.Module] = [linear_stack(nbytes, z.width, 1000 + i) for i in range(z.models)]
    one = model_bytes(models[0])
    budget = int(one * z.models / z.oversubscription)
    x = torch.randn(1, z.width)
    log(f"capacity {z.name}: {z.models} x {one / 2**20:.2f} MiB, budget {budget / 2**20:.0f} MiB")
    w = DeviceWorker(DeviceSpec(kind=env.kind, memory_budget_bytes=budget))
    keys = [ModelKey(f"c{i:04d}", "1") for i in range(z.models)]
    arm = PinnedLru(pinned_states(models, env.cuda), partial(linear_stack, nbytes, z.width, 0),
                    env.device, budget, torch.get_num_threads())
    try:
        timeshare = await _serving(w, z, keys, models)
        ts_cap, ts_curve = await _capacity(z, timeshare, x)
        env.free_cache()
        pin_cap, pin_curve = await _capacity(z, arm, x)
        env.free_cache()
        at_2x: dict = {}
        if ts_cap is not None:
            at_2x = {"rate_per_s": round(2 * ts_cap, 1),
                     "timeshare": await _at(z, timeshare, 2 * ts_cap, x, seed=200),
                     "host_ram_pinned": await _at(z, arm, 2 * ts_cap, x, seed=200)}
        status = w.status()
        host_path = None if env.cuda else await _host_path(env, z, models, keys, budget, x)
    finally:
        await w.close()
        arm.close()
    out: dict = {**asdict(z), "model_bytes": one, "device_budget_bytes": budget,
                 "timeshare_capacity_per_s": _round(ts_cap),
                 "pinned_capacity_per_s": _round(pin_cap),
                 "capacity_over_pinned": _ratio(ts_cap, pin_cap),
                 "at_2x_timeshare_capacity": at_2x,
                 "curves": {"timeshare": ts_curve, "host_ram_pinned": pin_curve},
                 "timeshare_swaps": status["swaps"]["count"],
                 "timeshare_expired": status["expired"]}
    if at_2x and ts_cap:
        out["goodput_at_2x_over_capacity"] = round(
            at_2x["timeshare"]["goodput_per_s"] / ts_cap, 3)
        out["pinned_goodput_at_2x_over_capacity"] = round(
            at_2x["host_ram_pinned"]["goodput_per_s"] / ts_cap, 3)
    if host_path is not None:
        out["host_path"] = host_path
    return out


async def _serving(w: DeviceWorker, z: Zoo, keys: list[ModelKey], models: list[nn.Module]
                   ) -> Call:
    """Register the zoo's models on ``w``; the call that sends one request to model ``i``."""
    for key, m in zip(keys, models, strict=True):
        await w.add_model(key, config(key.name, z.width), partial(copy.deepcopy, m))

    def call(i: int, xx: torch.Tensor, deadline: float) -> Awaitable[object]:
        return w.infer(keys[i], {"x": xx}, deadline=deadline)

    return call


async def _host_path(env: Env, z: Zoo, models: list[nn.Module], keys: list[ModelKey],
                     budget: int, x: torch.Tensor) -> dict:
    """The CPU run only: the same sweep through the CUDA executor's host path
    (``host_path.LaunchWaitExecutor``: launcher and waiter threads, several batches in
    flight per class, no inline batches), so the worker's decisions past capacity are
    measured where the CPU stand-in's one-batch device would hide them. Not a GPU figure."""
    w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=budget, inline_ms=0),
                     scheduler=device_scheduling_policy("priority", stream_priorities=True),
                     executor=LaunchWaitExecutor)
    try:
        call = await _serving(w, z, keys, models)
        cap, curve = await _capacity(z, call, x)
        env.free_cache()
        at_2x = await _at(z, call, 2 * cap, x, seed=200) if cap is not None else None
    finally:
        await w.close()
    return {"capacity_per_s": _round(cap), "curve": curve, "at_2x_capacity": at_2x,
            "goodput_at_2x_over_capacity":
                round(at_2x["goodput_per_s"] / cap, 3) if at_2x and cap else None}


async def run_capacity(env: Env) -> dict:
    out: dict = {"goodput_min": GOODPUT_MIN, "zoos": {}}
    for z in zoos(env):
        out["zoos"][z.name] = await _zoo(env, z)
        env.free_cache()
    rows = list(out["zoos"].values())
    out["min_capacity_over_pinned"] = _min([r.get("capacity_over_pinned") for r in rows])
    out["min_goodput_at_2x_over_capacity"] = _min(
        [r.get("goodput_at_2x_over_capacity") for r in rows])
    if not env.cuda:
        out["host_path_min_goodput_at_2x_over_capacity"] = _min(
            [r["host_path"]["goodput_at_2x_over_capacity"] for r in rows])
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _ratio(a: float | None, b: float | None) -> float | None:
    # a pinned arm that never held even the first rate: Timeshare's capacity over that rate
    return round(a / b, 3) if a is not None and b else None


def _min(values: list) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    return min(vals) if len(vals) == len(values) and vals else None
