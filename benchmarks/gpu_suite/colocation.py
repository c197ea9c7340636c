"""Colocation on the device: >= 100 models whose weights total >= 3x the device budget, Zipf
popularity, open-loop Poisson arrivals with deadlines; four arms on the same trace:

- ``timeshare``: the pool's ``DeviceWorker`` (host tier pinned on CUDA, swap-in on the copy
  stream, priority scheduling, per-model batching, deadline-aware refusals);
- ``stock_multiplex``: a Ray-free re-creation of stock Ray Serve multiplexing (LRU by count,
  load from disk on a miss; see ``colocation_arms``);
- ``host_ram_to_device``: host-RAM cache, ``.to(device)`` on a miss;
- ``host_ram_pinned``: the hand-written pinned-LRU loop (``colocation_arms.PinnedLru``), the
  strongest of the three baselines and the one the headline ratios are against.

Latency definitions follow ``benchmarks.colocation``: ``p50_ms``/``p99_ms`` over all requests (a
refusal counts with the time it took, a request unanswered at the cut-off with its time until
then), ``p99_answered_ms`` over model answers only, goodput = answers within the deadline per
second. On the CPU stand-in everything is scaled down (tiny models, low rate).
"""

from __future__ import annotations

import copy
import tempfile
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import torch
from torch import nn

from benchmarks.colocation import zipf_weights
from benchmarks.gpu_suite._env import Env, config, linear_stack, log, model_bytes
from benchmarks.gpu_suite.colocation_arms import (
    CountLru,
    Loader,
    PinnedLru,
    drive,
    from_disk,
    from_host,
    make_trace,
    pinned_states,
    summarize,
)
from pool import ModelKey
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec

__all__ = ["Colo", "run_colocation"]


@dataclass(frozen=True, slots=True)
class Colo:
    models: int
    width: int
    layers: int
    rate: float  # requests/s
    seconds: float
    deadline_ms: float
    drain_s: float
    zipf: float = 1.1
    oversubscription: float = 3.2  # total weights / device budget


def params(env: Env) -> Colo:
    if env.cuda:  # 100 x 32 MiB = 3.2 GiB of weights, 1 GiB budget
        return Colo(100, 1024, 8, rate=400, seconds=15, deadline_ms=100, drain_s=10)
    if env.quick:
        return Colo(100, 64, 2, rate=30, seconds=1.5, deadline_ms=250, drain_s=1.5)
    return Colo(100, 128, 4, rate=40, seconds=4, deadline_ms=250, drain_s=3)


@dataclass(frozen=True, slots=True)
class _Setup:
    p: Colo
    models: list[torch.nn.Module]
    budget: int
    trace: list[tuple[float, int]]
    x: torch.Tensor


async def _timeshare(env: Env, s: _Setup) -> dict:
    p = s.p
    w = DeviceWorker(DeviceSpec(kind=env.kind, memory_budget_bytes=s.budget))
    keys = [ModelKey(f"m{i:03d}", "1") for i in range(p.models)]
    try:
        for key, m in zip(keys, s.models, strict=True):
            await w.add_model(key, config(key.name, p.width), partial(copy.deepcopy, m))
        st0 = w.status()  # add_model swapped in what fits: count the trace's swaps only
        res = await drive(s.trace, lambda i, xx, dl: w.infer(keys[i], {"x": xx}, deadline=dl),
                          s.x, p.deadline_ms / 1e3, p.drain_s)
        st = w.status()
    finally:
        await w.close()
    return {**summarize(res, p.seconds), "swaps": st["swaps"]["count"] - st0["swaps"]["count"],
            "disk_loads": st["swaps"]["disk_loads"], "resident_at_end": len(st["resident"]),
            "evictions": st["evictions"] - st0["evictions"]}


async def _count_lru(env: Env, s: _Setup, k: int, load: Loader) -> dict:
    arm = CountLru(k, load, env.device, torch.get_num_threads())
    try:
        res = await drive(s.trace, arm, s.x, s.p.deadline_ms / 1e3, s.p.drain_s)
    finally:
        arm.close()
    return {**summarize(res, s.p.seconds), "swaps": arm.loads,
            "load_ms_mean": round(arm.load_s / max(1, arm.loads) * 1e3, 3), "resident_at_end": k}


async def _pinned(env: Env, s: _Setup, states: list[dict], skeleton) -> dict:
    arm = PinnedLru(states, skeleton, env.device, s.budget, torch.get_num_threads())
    try:
        res = await drive(s.trace, arm, s.x, s.p.deadline_ms / 1e3, s.p.drain_s)
    finally:
        arm.close()
    return {**summarize(res, s.p.seconds), "swaps": arm.loads,
            "load_ms_mean": round(arm.load_s / max(1, arm.loads) * 1e3, 3)}


async def run_colocation(env: Env) -> dict:
    p = params(env)
    nbytes = p.width * p.width * 4 * p.layers
    log(f"colocation: {p.models} models of {nbytes / 2**20:.2f} MiB")
    models: list[nn.Module] = [linear_stack(nbytes, p.width, 100 + i) for i in range(p.models)]
    one = model_bytes(models[0])
    s = _Setup(p, models, int(one * p.models / p.oversubscription),
               make_trace(p.models, p.rate, p.seconds, zipf_weights(p.models, p.zipf)),
               torch.randn(1, p.width))
    k = s.budget // one

    def skeleton() -> torch.nn.Module:
        return linear_stack(nbytes, p.width, 0)

    arms: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpu_suite_colo_") as tmp:
        paths = [str(Path(tmp) / f"m{i:03d}.pt") for i in range(p.models)]
        for path, m in zip(paths, models, strict=True):
            torch.save(m.state_dict(), path)
        host_state = [{n: t.detach().clone() for n, t in m.state_dict().items()} for m in models]
        log("colocation arm: timeshare")
        arms["timeshare"] = await _timeshare(env, s)
        env.free_cache()
        log("colocation arm: host_ram_pinned")
        arms["host_ram_pinned"] = await _pinned(env, s, pinned_states(models, env.cuda),
                                                skeleton)
        env.free_cache()
        for name, load in (("host_ram_to_device", from_host(host_state, skeleton, env.device)),
                           ("stock_multiplex", from_disk(paths, skeleton, env.device))):
            log(f"colocation arm: {name}")
            arms[name] = await _count_lru(env, s, k, load)
            env.free_cache()
    for a in arms.values():
        a["models_per_gpu"] = p.models  # every arm serves all of them from one device
    ts, stock, host = arms["timeshare"], arms["stock_multiplex"], arms["host_ram_to_device"]
    pinned = arms["host_ram_pinned"]
    return {
        **asdict(p), "model_bytes": one, "total_weight_bytes": one * p.models,
        "device_budget_bytes": s.budget, "models_fitting_budget": k, "requests": len(s.trace),
        "arms": arms,
        "timeshare_p99_over_pinned": _ratio(ts["p99_ms"], pinned["p99_ms"]),
        "goodput_over_pinned": _ratio(ts["goodput_per_s"], pinned["goodput_per_s"]),
        "stock_p99_over_timeshare": _ratio(stock["p99_ms"], ts["p99_ms"]),
        "host_ram_p99_over_timeshare": _ratio(host["p99_ms"], ts["p99_ms"]),
        "goodput_over_stock": _ratio(ts["goodput_per_s"], stock["goodput_per_s"]),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None
