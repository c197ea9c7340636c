"""Pipelined swap-in (PipeSwitch-style) vs swap-then-run, on one model of 1 GB (CPU: 16 MB).

Both arms start from the model in the host tier with another model resident (each round
alternates two models in a budget that holds one), and end when the first request's output is
on the host. Swap-then-run copies the whole model, then runs it; pipelined copies layer group
by layer group (the first group is the first layer) and runs each layer once its group is on
the device. "First layer ready" is from the start of the swap (reservation included) to the
first group's copy completing, read from CUDA events on the copy stream.
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from benchmarks.gpu_suite._env import Env, log
from benchmarks.gpu_suite.swap import two_model_tiers
from policies.priority import Priority
from pool._private.residency import Residency

__all__ = ["run_pipelined"]

I = Priority.INTERACTIVE


def _params(env: Env) -> tuple[int, int, int, int]:
    """(bytes, width, rows of the first request, rounds)"""
    if env.cuda:
        return 1 << 30, 4096, 1024, 5
    return (4 << 20, 256, 32, 2) if env.quick else (16 << 20, 512, 64, 3)


def _forward(env: Env, tiers: Residency, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        if not env.cuda:
            return module(x)
        assert tiers.compute_streams is not None
        stream = tiers.compute_streams[I]
        with torch.cuda.stream(stream):
            y = module(x)
        stream.synchronize()
        return y


def swap_then_run(env: Env, tiers: Residency, key: str,
                  x: torch.Tensor) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    swap = tiers.reserve(key, I, {})
    assert swap is not None
    host_s = tiers.copy(swap)
    if swap.events:
        swap.events[1].synchronize()  # the whole copy first
    y = _forward(env, tiers, tiers.module(key), x)
    e2e = time.perf_counter() - t0
    tiers.swapped(swap, host_s)
    return e2e, y


def pipelined(env: Env, tiers: Residency, key: str, x: torch.Tensor, first_bytes: int
              ) -> tuple[float, float, int, torch.Tensor]:
    t0 = time.perf_counter()
    swap = tiers.reserve(key, I, {})
    assert swap is not None
    pc = tiers.copy_pipelined(swap, first_bytes=first_bytes)
    assert pc is not None
    module = tiers.module(key)
    with pc.hooks(module):
        y = _forward(env, tiers, module, x)
    e2e = time.perf_counter() - t0
    copy_s = pc.synchronize()
    first = swap.reserved_s + pc.ready_s(0)
    tiers.swapped(swap, copy_s)
    return e2e, first, len(pc.groups), y


async def run_pipelined(env: Env) -> dict:
    nbytes, width, rows, rounds = _params(env)
    log(f"pipelined: building two {nbytes >> 20} MB models")
    tiers, models, one = await two_model_tiers(env, nbytes, width)
    x = torch.randn(rows, width, device=env.device)
    env.sync()  # made on the default stream; the compute stream does not wait for it
    layer_bytes = width * width * 4
    await tiers.ensure("1", I, {})
    seq, pipe, first, groups = [], [], [], 0
    close, bitwise = True, True
    for r in range(rounds + 1):  # round 0 warms both paths up and is not counted
        e2e_s, y_s = swap_then_run(env, tiers, "0", x)
        tiers.swap_out("0")  # the other model comes back for the pipelined arm's swap
        tiers.memory.release("0")
        await tiers.ensure("1", I, {})
        e2e_p, first_p, groups, y_p = pipelined(env, tiers, "0", x, layer_bytes)
        close = close and torch.allclose(y_s, y_p, rtol=1e-5, atol=1e-5)
        bitwise = bitwise and torch.equal(y_s, y_p)
        tiers.swap_out("0")
        tiers.memory.release("0")
        await tiers.ensure("1", I, {})
        if r:
            seq.append(e2e_s)
            pipe.append(e2e_p)
            first.append(first_p)
    med = statistics.median
    return {
        "model_bytes": one, "layers": len(models[0]) // 2, "layer_bytes": layer_bytes,
        "groups": groups, "first_request_rows": rows, "rounds": rounds,
        "first_layer_ready_ms": round(med(first) * 1e3, 3),
        "pipelined_first_request_ms": round(med(pipe) * 1e3, 3),
        "swap_then_run_first_request_ms": round(med(seq) * 1e3, 3),
        "pipelined_speedup": round(med(seq) / med(pipe), 3),
        "outputs_equal": close, "outputs_bitwise_equal": bitwise,
    }

