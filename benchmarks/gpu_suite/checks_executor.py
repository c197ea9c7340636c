"""Checks of the asynchronous executor: the serving loop with batches in flight.

- ``serving_loop_no_sync``: four models on a budget for two, requests of every class sent in
  concurrent waves, so swap-ins race other models' batches on the device. On CUDA all of it runs
  under ``torch.cuda.set_sync_debug_mode("error")`` (any synchronising call in the loop, the
  launcher or a swap raises and fails its request). Every answer must equal the same model
  loaded fresh (so a forward that overtook its copy, or a waiter that answered before its
  event, fails it), several batches must have been in flight at once (CUDA), and the pooled
  events must not grow with the number of batches.
"""

from __future__ import annotations

import asyncio
import copy
import random
from functools import partial

import torch

from benchmarks.gpu_suite._env import Env, check, config, linear_stack, model_bytes
from policies.priority import Priority
from pool._private.worker import DeviceWorker, ModelKey
from pool.device import DeviceSpec

__all__ = ["serving_loop_no_sync"]

WIDTH = 512


def _fresh_outputs(env: Env, models: list, x: torch.Tensor) -> list:
    outs = []
    with torch.inference_mode():
        for m in models:
            fresh = copy.deepcopy(m).to(env.device)
            outs.append(fresh(x.to(env.device)).cpu())
    env.sync()
    return outs


async def serving_loop_no_sync(env: Env) -> dict:
    n_models, waves, wave = 4, 40 if env.cuda else 10, 16
    models: list = [linear_stack(1 << 20, WIDTH, 300 + i) for i in range(n_models)]
    one = model_bytes(models[0])
    x = torch.randn(4, WIDTH)
    refs = _fresh_outputs(env, models, x)
    w = DeviceWorker(DeviceSpec(kind=env.kind, memory_budget_bytes=2 * one + one // 2,
                                inline_ms=0))
    keys = [ModelKey(f"s{i}", "1") for i in range(n_models)]
    rng = random.Random(5)
    peak, bad, errors = 0, 0, []
    try:
        for k, m in zip(keys, models, strict=True):
            await w.add_model(k, config(k.name, WIDTH), partial(copy.deepcopy, m))
        if env.cuda:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode("error")
        try:
            for _ in range(waves):
                picks = [(rng.randrange(n_models), Priority(rng.randrange(4)))
                         for _ in range(wave)]
                tasks = [asyncio.ensure_future(w.infer(keys[i], {"x": x}, priority=p))
                         for i, p in picks]
                await asyncio.sleep(0)  # let the launches happen
                peak = max(peak, w.executor.in_flight)
                for (i, _), r in zip(picks, await asyncio.gather(*tasks,
                                                                   return_exceptions=True),
                                     strict=True):
                    if isinstance(r, BaseException):
                        errors.append(f"{type(r).__name__}: {r}")
                    elif not torch.allclose(torch.as_tensor(r.outputs["y"]), refs[i],
                                            rtol=1e-5, atol=1e-5):
                        bad += 1
        finally:
            if env.cuda:
                torch.cuda.set_sync_debug_mode("default")
        swaps = w.status()["swaps"]["count"]
        events = getattr(getattr(w.executor, "_events", None), "created", 0)
        launched = w.executor.launched
    finally:
        await w.close()
    requests = waves * wave
    overlapped = peak >= 2 or not env.cuda  # the CPU stand-in runs one batch at a time
    pooled = events <= 64 + 8  # the pool keeps 64 pairs; a leak grows with the batches
    ok = not errors and not bad and swaps > 0 and overlapped and pooled
    where = "under sync debug mode 'error'" if env.cuda else "on the CPU stand-in"
    return check(ok, f"{requests} requests of every class {where}, {swaps} swaps, up to {peak} "
                 f"batches in flight: every answer equals a fresh model's" if ok else
                 f"errors={errors[:3]} ({len(errors)}), wrong answers={bad}, swaps={swaps}, "
                 f"peak in flight={peak}, event pairs created={events}",
                 requests=requests, swaps=swaps, peak_in_flight=peak, batches=launched,
                 event_pairs_created=events)
