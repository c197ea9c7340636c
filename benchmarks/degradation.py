"""Degradation benchmark: a model that hangs on 20 % of calls, with vs without the chain runner.

Open-loop Poisson load on a real torch model (``nn.Linear``) whose primary replica hangs on a
seeded 20 % of calls. Both arms see the same arrivals and the same hang decisions, in one run:

* ``baseline_no_fallback``: call the model with the deadline as a timeout; a timeout is an
  error (the naive client).
* ``baseline_wait``: call the model and wait for it, however long (no deadline at all).
* ``chain``: ``fallbacks.ChainRunner`` with the chain [model: small, default] and a breaker.

Latency is measured from the scheduled arrival time (open loop: a slow answer does not delay
later arrivals). ``python -m benchmarks.degradation --json out.json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from benchmarks._output import emit
from common.fallback_types import FallbackStep
from fallbacks import (
    BreakerRegistry,
    ChainRunner,
    Deadline,
    FallbackRequest,
    ModelReply,
    PoolName,
    Target,
    compile_chain,
)

IN_FEATURES, OUT_FEATURES = 64, 10


class TorchExecutor:
    """Implements ``fallbacks.ModelExecutor`` over in-process torch models; ``big`` may hang."""

    def __init__(self, models: dict[str, nn.Module], hangs: set[str], hang_s: float) -> None:
        self.models = models
        self.hangs = hangs  # request ids whose primary call hangs
        self.hang_s = hang_s

    async def call_model(
        self,
        request: FallbackRequest,
        *,
        model: str,
        version: str | None,
        pool: PoolName,
        budget_s: float,
    ) -> ModelReply:
        if model == "big" and request.request_id in self.hangs:
            await asyncio.sleep(self.hang_s)  # a stuck replica: answers far too late
        x = torch.from_numpy(request.inputs["x"])
        with torch.inference_mode():
            y = self.models[model](x)
        return ModelReply({"logits": y.numpy()}, version or "1")


@dataclass
class Outcome:
    latency_s: float | None  # None: no answer (error)
    degraded: bool


async def _open_loop(arrivals: list[float], handle) -> list[Outcome]:
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.05
    tasks = []
    for i, at in enumerate(arrivals):
        delay = start + at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(handle(i, start + at)))
    return list(await asyncio.gather(*tasks))


def _summary(outcomes: list[Outcome], deadline_ms: float) -> dict:
    lat = np.array([o.latency_s * 1000 for o in outcomes if o.latency_s is not None])
    n = len(outcomes)
    answered = len(lat)
    within = int(np.sum(lat <= deadline_ms + 10.0)) if answered else 0
    return {
        "sent": n,
        "answered": answered,
        "share_answered": answered / n,
        "share_answered_within_deadline_plus_10ms": within / n,
        "share_degraded": sum(o.degraded for o in outcomes if o.latency_s is not None) / n,
        "p50_ms": float(np.percentile(lat, 50)) if answered else None,
        "p99_ms": float(np.percentile(lat, 99)) if answered else None,
        "max_ms": float(lat.max()) if answered else None,
    }


Arm = Callable[[int, float], Awaitable[Outcome]]


def _models() -> dict[str, nn.Module]:
    """The primary (``big``) and the fallback (``small``), seeded, one torch thread."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    models: dict[str, nn.Module] = {
        "big": nn.Linear(IN_FEATURES, OUT_FEATURES),
        "small": nn.Linear(IN_FEATURES, OUT_FEATURES),
    }
    for m in models.values():
        m.eval()
    return models


def _schedule(args: argparse.Namespace) -> tuple[list[float], set[str]]:
    """Seeded Poisson arrival times, and the request ids whose primary call hangs."""
    rng = random.Random(args.seed)
    arrivals, t = [], 0.0
    while t < args.duration_s:
        t += rng.expovariate(args.rate)
        arrivals.append(t)
    hangs = {str(i) for i in range(len(arrivals)) if rng.random() < args.hang_share}
    return arrivals, hangs


def _arms(args: argparse.Namespace, ex: TorchExecutor, inputs: np.ndarray
          ) -> tuple[Arm, Arm, Arm]:
    """The arms' request handlers: no fallback (deadline as timeout), wait, and the chain."""
    loop = asyncio.get_running_loop()

    def req(i: int) -> FallbackRequest:
        return FallbackRequest(model="big", inputs={"x": inputs}, request_id=str(i))

    async def baseline(i: int, arrived: float) -> Outcome:
        budget = max(0.0, args.deadline_ms / 1000 - (loop.time() - arrived))
        try:
            await asyncio.wait_for(
                ex.call_model(req(i), model="big", version="1", pool="gpu", budget_s=budget), budget
            )
        except asyncio.TimeoutError:
            return Outcome(None, False)
        return Outcome(loop.time() - arrived, False)

    chain = compile_chain(
        [
            FallbackStep(kind="model", model="small", version="1"),
            FallbackStep(kind="default", outputs={"logits": [[0.0] * OUT_FEATURES]}),
        ]
    )
    runner = ChainRunner(ex, breakers=BreakerRegistry(), clock=loop.time)

    async def with_chain(i: int, arrived: float) -> Outcome:
        deadline = Deadline(at=arrived + args.deadline_ms / 1000, clock=loop.time)
        try:
            res = await runner.run(
                req(i), deadline=deadline, chain=chain, primary=Target("big", "1")
            )
        except Exception:  # noqa: BLE001 - any error counts as not answered
            return Outcome(None, False)
        return Outcome(loop.time() - arrived, res.degraded)

    async def wait(i: int, arrived: float) -> Outcome:
        await ex.call_model(req(i), model="big", version="1", pool="gpu", budget_s=1e9)
        return Outcome(loop.time() - arrived, False)

    return baseline, wait, with_chain


async def run(args: argparse.Namespace) -> dict:
    models = _models()
    arrivals, hangs = _schedule(args)
    inputs = np.random.default_rng(args.seed).standard_normal((1, IN_FEATURES), dtype=np.float32)
    ex = TorchExecutor(models, hangs, args.hang_s)
    baseline, wait, with_chain = _arms(args, ex, inputs)
    base = _summary(await _open_loop(arrivals, baseline), args.deadline_ms)
    waited = _summary(await _open_loop(arrivals, wait), args.deadline_ms)
    ours = _summary(await _open_loop(arrivals, with_chain), args.deadline_ms)
    return {
        "benchmark": "degradation",
        "model": f"torch nn.Linear({IN_FEATURES}, {OUT_FEATURES}), cpu",
        "load": {
            "rate_rps": args.rate,
            "duration_s": args.duration_s,
            "requests": len(arrivals),
            "hang_share_actual": len(hangs) / len(arrivals),
            "hang_s": args.hang_s,
        },
        "deadline_ms": args.deadline_ms,
        "latency_over": "answered requests, from scheduled arrival",
        "baseline_no_fallback": base,
        "baseline_wait": waited,
        "chain_runner": ours,
        "ratios": {
            "answered_chain_vs_baseline": ours["share_answered"]
            / max(base["share_answered"], 1e-9),
            "chain_p99_minus_deadline_ms": (ours["p99_ms"] or float("inf")) - args.deadline_ms,
            "p99_chain_vs_wait": (ours["p99_ms"] or float("inf")) / (waited["p99_ms"] or 1e-9),
        },
        "targets": {
            "chain_answered_100pct": ours["share_answered"] == 1.0,
            "chain_p99_le_deadline_plus_10ms": (ours["p99_ms"] or float("inf"))
            <= args.deadline_ms + 10.0,
        },
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="also write the JSON object to this file")
    p.add_argument("--rate", type=float, default=200.0, help="arrivals per second (Poisson)")
    p.add_argument("--duration-s", type=float, default=4.0, help="seconds of load per arm")
    p.add_argument("--deadline-ms", type=float, default=50.0)
    p.add_argument("--hang-share", type=float, default=0.2)
    p.add_argument("--hang-s", type=float, default=2.0, help="how long a hung call takes")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    out = asyncio.run(run(args))
    out["wall_s"] = round(time.monotonic() - t0, 2)
    emit(out, args.json)


if __name__ == "__main__":
    main()
