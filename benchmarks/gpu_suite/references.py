"""The priority section's references: what a capable user writes without Timeshare.

- ``floor``: the realtime model called directly, one row at a time, in one thread (on CUDA on
  the device's most urgent stream, the input copied non-blocking from pinned memory, the
  output read back with ``.cpu()``), open loop at the realtime rate. Timeshare's realtime p50
  alone is reported over this floor.
- ``streams``: plain CUDA stream priorities: realtime as above on the most urgent stream in
  one thread, background batches *unchunked* on the least urgent stream in ``bg_clients``
  threads (closed loop), and background alone the same way. Timeshare's realtime p99 beside
  background and its background throughput are reported over these.

On the CPU stand-in there are no streams: the same threads run on the CPU (no GPU evidence).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from argparse import Namespace

import torch
from torch import nn

from benchmarks import priority as prio
from benchmarks.gpu_suite._env import Env, pct

__all__ = ["run_references"]


def _stream(env: Env, urgent: bool) -> torch.cuda.Stream | None:
    if not env.cuda:
        return None
    low, high = torch.cuda.Stream.priority_range()  # type: ignore[call-arg]
    return torch.cuda.Stream(env.device, priority=high if urgent else low)


def _call(model: nn.Module, x: torch.Tensor, device: str, stream) -> torch.Tensor:
    with torch.inference_mode():
        if stream is None:
            return model(x)
        with torch.cuda.stream(stream):
            return model(x.to(device, non_blocking=True)).cpu()  # .cpu(): waits for this stream


def _realtime(env: Env, model: nn.Module, rate: float, stop: float, out: list[float]) -> None:
    stream = _stream(env, urgent=True)
    x = torch.randn(1, prio.WIDTH, pin_memory=env.cuda)
    rng = random.Random(11)
    at = time.perf_counter()
    while True:
        at += rng.expovariate(rate)
        if at >= stop:
            return
        delay = at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        _call(model, x, env.device, stream)
        out.append(time.perf_counter() - at)  # from its arrival: a late start counts


def _background(env: Env, model: nn.Module, rows: int, stop: float, done: list[int]) -> None:
    stream = _stream(env, urgent=False)
    x = torch.randn(rows, prio.WIDTH, pin_memory=env.cuda)
    while time.perf_counter() < stop:
        _call(model, x, env.device, stream)
        if time.perf_counter() <= stop:
            done.append(rows)


def _phase(env: Env, args: Namespace, rt: nn.Module, bg: nn.Module, *, with_rt: bool,
           with_bg: bool) -> dict:
    lat: list[float] = []
    rows: list[int] = []
    start = time.perf_counter()
    stop = start + args.seconds
    threads = ([threading.Thread(target=_realtime, args=(env, rt, args.rt_rate, stop, lat))]
               if with_rt else [])
    threads += [threading.Thread(target=_background, args=(env, bg, args.bg_rows, stop, rows))
                for _ in range(args.bg_clients if with_bg else 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = args.seconds
    out: dict = {}
    if with_rt:
        out.update(rt_requests=len(lat), rt_p50_ms=pct(lat, 50), rt_p99_ms=pct(lat, 99))
    if with_bg:
        out["bg_rows_per_s"] = round(sum(rows) / elapsed, 1)
    return out


def _models(env: Env, args: Namespace) -> tuple[nn.Module, nn.Module]:
    # the same models and seeds as benchmarks.priority's realtime and background
    rt = prio._mlp(1024, 2, 1).eval().to(env.device)
    bg = prio._mlp(args.bg_hidden, args.bg_depth, 2).eval().to(env.device)
    env.sync()
    return rt, bg


def _references(env: Env, args: Namespace) -> dict:
    torch.set_num_threads(max(1, args.threads))
    rt, bg = _models(env, args)
    for _ in range(20):  # warm-up (kernels, allocator)
        _call(rt, torch.randn(1, prio.WIDTH), env.device, _stream(env, True))
    floor = _phase(env, args, rt, bg, with_rt=True, with_bg=False)
    bg_alone = _phase(env, args, rt, bg, with_rt=False, with_bg=True)
    mixed = _phase(env, args, rt, bg, with_rt=True, with_bg=True)
    return {
        "floor": floor, "streams_background_alone": bg_alone, "streams_mixed": mixed,
        "streams_rt_p99_vs_floor": _ratio(mixed.get("rt_p99_ms"), floor.get("rt_p99_ms")),
        "streams_bg_kept": _ratio(mixed.get("bg_rows_per_s"), bg_alone.get("bg_rows_per_s")),
    }


async def run_references(env: Env, args: Namespace) -> dict:
    """Floor and stream-priority reference, off the event loop (they are plain threads)."""
    return await asyncio.to_thread(_references, env, args)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None
