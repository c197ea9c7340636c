"""Many models on one device: Timeshare's pool vs stock Ray Serve ``@serve.multiplexed``.

    python -m benchmarks.colocation --json out.json [--models 40] [--seconds 15] [--rate 60]

``--models`` TorchScript MLPs are written to a temporary model repository. The device budget holds
about a quarter of their weights. Requests pick a model by Zipf(1.1) popularity and arrive
open-loop (Poisson, ``--rate``/s), each with a deadline (``--deadline-ms``). Both arms run in one
local Ray instance, one after the other, with one replica each:

- baseline: stock ``@serve.multiplexed(max_num_models_per_replica=K)``, K = models that fit in the
  budget; a miss loads the model from disk (LRU eviction, no priorities);
- timeshare: a minimal deployment wrapping ``DeviceWorker`` (CPU stand-in with the same budget,
  weights kept in the host tier, swap-in = a copy into the device arena), routed by
  ``TimeshareRequestRouter``. (Defined here because the pool deployment lives with the lead.)

Reports p50/p99 latency, goodput (answers within the deadline per second), swaps/loads, ratios.
Targets: p99 at most 1/3 of the baseline's, goodput at least 2x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

IN, HIDDEN = 64, 512


def build_repo(root: Path, n: int) -> int:
    """Write ``n`` TorchScript MLPs; returns the bytes of one model's weights."""
    nbytes = 0
    for i in range(n):
        torch.manual_seed(i)
        m = nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 10)).eval()
        torch.jit.script(m).save(str(root / f"m{i:02d}.pt"))
        nbytes = sum(p.numel() * p.element_size() for p in m.parameters())
    return nbytes


def zipf_weights(n: int, s: float = 1.1) -> list[float]:
    w = [1.0 / (k ** s) for k in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def _deployments(repo: str, names: list[str], budget: int, k: int):
    from ray import serve
    from ray.serve.config import RequestRouterConfig

    @serve.deployment(max_ongoing_requests=512, ray_actor_options={"num_cpus": 0})
    class Multiplexed:
        def __init__(self) -> None:
            torch.set_num_threads(1)
            self.loads = 0

        @serve.multiplexed(max_num_models_per_replica=k)
        async def get_model(self, model_id: str):
            self.loads += 1
            return torch.jit.load(os.path.join(repo, f"{model_id}.pt"))

        async def __call__(self, x: np.ndarray, deadline_s: float) -> bool:
            model = await self.get_model(serve.get_multiplexed_model_id())
            with torch.inference_mode():
                model(torch.from_numpy(x))
            return True

        def stats(self) -> dict:
            return {"disk_loads": self.loads}

    @serve.deployment(
        max_ongoing_requests=512, ray_actor_options={"num_cpus": 0},
        request_router_config=RequestRouterConfig(
            request_router_class="pool.request_router:TimeshareRequestRouter",
            request_routing_stats_period_s=0.5),
    )
    class Timeshare:
        def __init__(self) -> None:
            torch.set_num_threads(1)
            self.worker = None

        async def setup(self) -> None:
            from pool._private.worker import DeviceWorker, ModelKey
            from pool.config import ModelConfig
            from pool.device import DeviceSpec

            self.worker = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=budget,
                                                  threads=1))
            for name in names:
                cfg = ModelConfig(name=name, inputs=[{"name": "x", "dtype": "FP32", "shape": [IN]}],
                                  outputs=[{"name": "y", "dtype": "FP32", "shape": [10]}],
                                  batch_wait_ms=0)
                path = os.path.join(repo, f"{name}.pt")
                await self.worker.add_model(ModelKey(name, "1"), cfg,
                                            lambda p=path: torch.jit.load(p))

        async def __call__(self, request: dict) -> bool:
            from pool._private.worker import ModelKey
            from pool.errors import RequestExpired

            try:
                await self.worker.infer(
                    ModelKey(request["model"], "1"), {"x": torch.from_numpy(request["x"])},
                    deadline=time.monotonic() + request["deadline_s"])
            except RequestExpired:
                return False
            return True

        def record_routing_stats(self) -> dict:
            return self.worker.routing_stats().to_dict() if self.worker else {}

        def stats(self) -> dict:
            st = self.worker.status()
            return {"swaps": st["swaps"], "expired": st["expired"], "evictions": st["evictions"]}

    return Multiplexed, Timeshare


async def _drive(call, names, weights, args) -> tuple[list[float], int]:
    rng = random.Random(11)
    lat: list[float] = []
    ok = 0
    deadline_s = args.deadline_ms / 1e3

    async def one(name: str) -> None:
        nonlocal ok
        x = np.random.default_rng(0).standard_normal((1, IN), dtype=np.float32)
        t0 = time.perf_counter()
        try:
            served = await call(name, x, deadline_s)
        except Exception:
            served = False
        dt = time.perf_counter() - t0
        lat.append(dt)
        if served and dt <= deadline_s:
            ok += 1

    tasks = []
    start = time.perf_counter()
    next_at = start
    while True:
        next_at += rng.expovariate(args.rate)
        if next_at - start >= args.seconds:
            break
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
        tasks.append(asyncio.create_task(one(rng.choices(names, weights)[0])))
    await asyncio.gather(*tasks)
    return lat, ok


def _summary(lat: list[float], ok: int, seconds: float, extra: dict) -> dict:
    a = np.array(lat) * 1e3
    return {"requests": len(lat), "p50_ms": round(float(np.percentile(a, 50)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2),
            "goodput_per_s": round(ok / seconds, 2), "within_deadline": ok, **extra}


async def _run_arms(args, repo: str, names: list[str], budget: int, k: int) -> dict:
    from ray import serve

    Multiplexed, Timeshare = _deployments(repo, names, budget, k)
    weights = zipf_weights(len(names))
    out = {}

    base = serve.run(Multiplexed.bind(), name="baseline", route_prefix=None)

    async def call_base(name, x, deadline_s):
        return await base.options(multiplexed_model_id=name).remote(x, deadline_s)

    lat, ok = await _drive(call_base, names, weights, args)
    out["baseline"] = _summary(lat, ok, args.seconds, await base.stats.remote())
    serve.delete("baseline")

    ts = serve.run(Timeshare.bind(), name="timeshare", route_prefix=None)
    await ts.setup.remote()

    async def call_ts(name, x, deadline_s):
        return await ts.remote({"model": name, "x": x, "deadline_s": deadline_s})

    lat, ok = await _drive(call_ts, names, weights, args)
    out["timeshare"] = _summary(lat, ok, args.seconds, await ts.stats.remote())
    serve.delete("timeshare")
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the JSON object to this file")
    ap.add_argument("--models", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=15.0, help="load duration of each arm")
    ap.add_argument("--rate", type=float, default=80.0, help="requests per second (Poisson)")
    ap.add_argument("--deadline-ms", type=float, default=250.0)
    args = ap.parse_args(argv)
    if args.models < 4:
        ap.error(f"--models must be >= 4, got {args.models}")
    import ray
    from ray import serve

    with tempfile.TemporaryDirectory(prefix="timeshare-colo-") as tmp:
        model_bytes = build_repo(Path(tmp), args.models)
        names = [f"m{i:02d}" for i in range(args.models)]
        budget = args.models * model_bytes // 4
        k = max(1, budget // model_bytes)
        root = str(Path(__file__).resolve().parents[1])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": root}})
        try:
            arms = asyncio.run(_run_arms(args, tmp, names, budget, k))
        finally:
            serve.shutdown()
            ray.shutdown()
    b, t = arms["baseline"], arms["timeshare"]
    p99_ratio = t["p99_ms"] / b["p99_ms"] if b["p99_ms"] else None
    goodput_ratio = t["goodput_per_s"] / b["goodput_per_s"] if b["goodput_per_s"] else None
    out = {
        "benchmark": "colocation", "models": args.models, "zipf_s": 1.1,
        "model_bytes": model_bytes, "device_budget_bytes": budget,
        "baseline_max_num_models_per_replica": k, "replicas": 1, "rate_per_s": args.rate,
        "seconds_per_arm": args.seconds, "deadline_ms": args.deadline_ms,
        "baseline": b, "timeshare": t,
        "p99_ratio_timeshare_over_baseline": None if p99_ratio is None else round(p99_ratio, 3),
        "goodput_ratio_timeshare_over_baseline":
            None if goodput_ratio is None else round(goodput_ratio, 3),
        "goodput_ratio_note": ("baseline goodput is 0 (every answer missed the deadline)"
                               if goodput_ratio is None else ""),
        "targets": {"p99_ratio_max": 1 / 3, "goodput_ratio_min": 2.0},
        "meets_targets": bool(p99_ratio is not None and p99_ratio <= 1 / 3
                              and (goodput_ratio >= 2.0 if goodput_ratio is not None
                                   else t["goodput_per_s"] > 0)),
    }
    text = json.dumps(out)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return out


if __name__ == "__main__":
    main()
