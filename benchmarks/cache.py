"""Result-cache benchmark: hit latency per tier vs the model call it replaces, and throughput on
a Zipf-repeated workload with and without the cache, side by side in one run.

    python -m benchmarks.cache --json out.json

The model is a real torch MLP (64 → 256 → 256 → 10) called with one row, as the pipeline's compute
would. Redis: the server at ``--redis-url`` when it answers, else a ``redis-server`` started on a
free port, else the Redis figures are reported as skipped with the reason. The semantic tier uses
the bundled MiniLM embedder (``--no-semantic`` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._cache_kit import compute_for, expect, mlp, pct, redis_server, timed
from benchmarks._output import emit
from pool.config import CacheConfig
from router.cache import CacheSettings, ResultCache
from router.schemas import CacheControl

EXACT = CacheConfig(mode="exact", ttl_s=600)
SEMANTIC = CacheConfig(mode="semantic", ttl_s=600)
CONTROL = CacheControl()


# -- measurements --------------------------------------------------------------------------------


async def _latencies(net, redis_url: str | None, n: int, semantic: bool, sem_n: int) -> dict:
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    res: dict[str, Any] = {}
    compute = compute_for(net, x)
    await timed(compute, 200)  # warm up
    res["model_call"] = pct(await timed(compute, n))

    prefix = f"ts:bench:{uuid.uuid4().hex[:8]}:"
    cache = ResultCache(CacheSettings(redis_url=redis_url, key_prefix=prefix))
    try:

        def call():
            return cache.get_or_compute(
                model="mlp",
                version="1",
                inputs={"x": x},
                text=None,
                policy=EXACT,
                control=CONTROL,
                compute=compute,
            )

        await call()
        await timed(call, 200)
        res["memory_hit"] = pct(await timed(call, n, check=expect("memory")))
        if redis_url:
            await timed(call, 200, before=cache.clear_memory)
            res["redis_hit"] = pct(
                await timed(call, n, before=cache.clear_memory, check=expect("redis"))
            )
    finally:
        await cache.close()
    if semantic:
        res["semantic_hit"] = await _semantic_latency(net, x, sem_n)
        res["semantic_lookup"] = await _semantic_costs(net, sem_n)
    return res


async def _semantic_latency(net, x, n: int) -> dict:
    from router.cache import MiniLMEmbedder

    embedder = MiniLMEmbedder.load()
    with tempfile.TemporaryDirectory() as d:
        cache = ResultCache(CacheSettings(semantic_dir=d), embedder=embedder)

        def ask(xi: np.ndarray, text: str) -> Awaitable[Any]:
            return cache.get_or_compute(
                model="mlp", version="1", inputs={"x": xi}, text=text, policy=SEMANTIC,
                control=CONTROL, compute=compute_for(net, xi),
            )  # fmt: skip

        try:
            await ask(x, "How do I reset my password?")
            await cache.drain()
            counter = iter(range(10**9))

            def call() -> Awaitable[Any]:
                # new token ids each time (exact tiers miss), paraphrased text (semantic hits)
                return ask(x + np.float32(next(counter) + 1), "How can I reset my password?")

            await timed(call, 5)
            return pct(await timed(call, n, check=expect("semantic")))
        finally:
            await cache.close()


async def _semantic_costs(net, n: int) -> dict:
    """A semantic lookup's cost, split: the MiniLM embedding of one sentence, and the tier's
    lookup given that embedding (faiss search over a 1,000-entry store, sqlite read, lexical
    guard, decode) as a request whose embedding the router already made pays it; plus the
    near-miss set's wrong hits and recall at the default settings."""
    from router.cache import MiniLMEmbedder, SharedEmbedder
    from router.cache.near_miss_set import load_near_misses, score_near_misses

    minilm = MiniLMEmbedder.load()
    pairs = load_near_misses()
    asked = [p.asked for p in pairs if p.same]
    emb_s = []
    for i in range(n):
        t0 = time.perf_counter()
        minilm.embed([f"{asked[i % len(asked)]} ({i})"])
        emb_s.append(time.perf_counter() - t0)
    shared = SharedEmbedder(minilm, max_texts=4096)
    fillers = [f"Question {i} about order {i * 7} and invoice {i * 13}" for i in range(1000)]
    shared.embed(fillers)  # batch-embedded up front: the store fill is not what we time
    with tempfile.TemporaryDirectory() as d:
        cache = ResultCache(CacheSettings(semantic_dir=d), embedder=shared)
        try:
            for i, text in enumerate(fillers + ["How do I reset my password?"]):
                xi = np.full((1, 64), i, dtype=np.float32)
                await cache.get_or_compute(
                    model="mlp", version="1", inputs={"x": xi}, text=text, policy=SEMANTIC,
                    control=CacheControl(skip_read=True), compute=compute_for(net, xi))
            await cache.drain()
            shared.embed(["How can I reset my password?"])  # the router's embedding, reused
            counter = iter(range(10**9))

            def call() -> Awaitable[Any]:
                xi = np.full((1, 64), -1 - next(counter), dtype=np.float32)
                return cache.get_or_compute(
                    model="mlp", version="1", inputs={"x": xi},
                    text="How can I reset my password?", policy=SEMANTIC, control=CONTROL,
                    compute=compute_for(net, xi))

            await timed(call, 5)
            lookup = pct(await timed(call, n, check=expect("semantic")))
            near = await score_near_misses(cache, pairs, model="near-miss")
        finally:
            await cache.close()
    return {"embedding_one_sentence": pct(emb_s), "lookup_given_embedding": lookup,
            "store_entries": len(fillers) + 1, "near_miss_set": near.as_dict(),
            "threshold": CacheSettings().semantic_threshold}


async def _zipf(
    net, redis_url: str | None, *, requests: int, distinct: int, s: float, concurrency: int
) -> dict:
    rng = np.random.default_rng(7)
    pool = rng.standard_normal((distinct, 1, 64)).astype(np.float32)
    ranks = np.arange(1, distinct + 1, dtype=np.float64)
    p = ranks**-s
    order = rng.choice(distinct, size=requests, p=p / p.sum())

    async def run(handler) -> float:
        queue = iter(order.tolist())

        async def worker():
            for i in queue:
                await handler(pool[i])

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests / (time.perf_counter() - t0)

    async def no_cache(x):
        await compute_for(net, x)()

    out: dict[str, Any] = {
        "requests": requests,
        "distinct_inputs": distinct,
        "zipf_s": s,
        "concurrency": concurrency,
        "distinct_seen": len(np.unique(order)),
    }
    out["no_cache_rps"] = round(await run(no_cache), 1)
    variants = [("memory_only", None)] + ([("memory_and_redis", redis_url)] if redis_url else [])
    for name, url in variants:
        cache = ResultCache(
            CacheSettings(redis_url=url, key_prefix=f"ts:bench:{uuid.uuid4().hex[:8]}:")
        )
        try:

            async def cached(x, cache=cache):
                await cache.get_or_compute(
                    model="mlp",
                    version="1",
                    inputs={"x": x},
                    text=None,
                    policy=EXACT,
                    control=CONTROL,
                    compute=compute_for(net, x),
                )

            rps = await run(cached)
            out[f"{name}_rps"] = round(rps, 1)
            out[f"{name}_vs_no_cache"] = round(rps / out["no_cache_rps"], 2)
            out[f"{name}_counters"] = cache.counters()
        finally:
            await cache.close()
    return out


async def _mlp_host(net, repo: Path) -> Any:
    """``net`` as model ``mlp`` in a fresh repository at ``repo``, loaded by a real ModelHost
    over a CPU DeviceWorker (no batching wait)."""
    import yaml

    from pool._private.worker import DeviceWorker
    from pool.device import DeviceSpec
    from pool.host import ModelHost
    from pool.repository import ModelRepository

    (repo / "mlp" / "1").mkdir(parents=True)
    torch.jit.script(net).save(str(repo / "mlp" / "1" / "model.pt"))
    (repo / "mlp" / "config.yaml").write_text(yaml.safe_dump({
        "name": "mlp", "inputs": [{"name": "x", "dtype": "FP32", "shape": [64]}],
        "outputs": [{"name": "y", "dtype": "FP32", "shape": [10]}], "batch_wait_ms": 0}))
    host = ModelHost(ModelRepository(repo, settle_s=0),
                     DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=64 << 20)))
    await host.sync()
    return host


async def _pipeline_sample(pipe, rng: np.random.Generator, n: int, tier: str,
                           prepare=None) -> dict:
    """``n`` timed ``pipe.infer`` calls answered by ``tier`` ("model_call": cache skipped), each
    on a fresh input (filled first when a hit is wanted)."""
    from router.schemas import CacheControl, InferenceRequest

    def req(x, **cache_ctl):
        return InferenceRequest(model="mlp", inputs={"x": x}, cache=CacheControl(**cache_ctl))

    times = []
    for _ in range(n):
        x = rng.random((1, 64), dtype=np.float32)
        if tier != "model_call":
            await pipe.infer(req(x))  # fill
        if prepare:
            prepare()
        # The request object is built before timing, as it arrives at the pipeline.
        request = (req(x, skip_read=True, skip_write=True) if tier == "model_call"
                   else req(x))
        t0 = time.perf_counter()
        r = await pipe.infer(request)
        times.append(time.perf_counter() - t0)
        want = "off" if tier == "model_call" else tier
        if r.cache != want:
            raise RuntimeError(f"pipeline {tier}: expected cache={want}, got {r.cache}")
    return pct(times)


async def _pipeline_latencies(net, redis_url: str | None, n: int) -> dict:
    """The same hits measured through ``Pipeline.infer`` (validation, catalog, cache, response),
    in-process over a real ModelHost/DeviceWorker: what a request pays inside the ingress."""
    from router.catalog import ModelCatalog
    from router.pipeline import Pipeline
    from router.pool_client import LocalPoolClient

    with tempfile.TemporaryDirectory() as tmp:
        host = await _mlp_host(net, Path(tmp))

        async def index():
            return host.index()

        catalog = ModelCatalog(index)
        await catalog.refresh()
        cache = ResultCache(CacheSettings(redis_url=redis_url))
        pipe = Pipeline(catalog, {"cpu": LocalPoolClient(host)}, cache=cache)
        rng = np.random.default_rng(1)
        out: dict[str, Any] = {}
        try:
            out["model_call"] = await _pipeline_sample(pipe, rng, n, "model_call")
            out["memory_hit"] = await _pipeline_sample(pipe, rng, n, "memory")
            if redis_url:
                out["redis_hit"] = await _pipeline_sample(pipe, rng, n, "redis",
                                                          prepare=cache.clear_memory)
        finally:
            await cache.close()
            await host.worker.close()
        return out


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the JSON object to this file")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--n", type=int, default=3000, help="samples per exact-tier latency")
    ap.add_argument("--semantic-n", type=int, default=100, help="samples of a semantic hit")
    ap.add_argument("--no-semantic", action="store_true", help="skip the MiniLM semantic tier")
    ap.add_argument("--requests", type=int, default=20000, help="Zipf workload length")
    ap.add_argument("--distinct", type=int, default=2000, help="distinct inputs in the workload")
    ap.add_argument("--zipf-s", type=float, default=1.1)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch intra-op threads (1 = steady numbers on a shared machine)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke test: few samples")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.semantic_n, args.requests, args.distinct = 200, 20, 2000, 200
    return args


def _targets(lat: dict, pipe: dict, sem: dict | None, how: str) -> dict[str, Any]:
    """Each target's verdict, or ``"skipped: <why>"`` where its tier was not measured."""
    return {
        "memory_hit_p50_under_0.2ms": lat["memory_hit"]["p50_ms"] < 0.2,
        "redis_hit_p50_under_1ms": (
            lat["redis_hit"]["p50_ms"] < 1.0 if "redis_hit" in lat else "skipped: " + how
        ),
        # The measurement point: inside the pipeline (Pipeline.infer), not over HTTP.
        "pipeline_memory_hit_p50_under_0.2ms": pipe["memory_hit"]["p50_ms"] < 0.2,
        "pipeline_redis_hit_p50_under_1ms": (
            pipe["redis_hit"]["p50_ms"] < 1.0 if "redis_hit" in pipe else "skipped: " + how
        ),
        # #18: no near-miss served at the default settings, paraphrase recall >= 60 %
        "near_miss_wrong_hits_0": (sem["near_miss_set"]["pairs_wrong_hits"] == 0
                                   if sem else "skipped: --no-semantic"),
        "near_miss_recall_at_least_0.6": (sem["near_miss_set"]["recall"] >= 0.6
                                          if sem else "skipped: --no-semantic"),
    }


def _env() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> dict:
    args = _parse_args(argv)
    torch.set_num_threads(args.torch_threads)
    net = mlp()
    url, proc, how = redis_server(args.redis_url)
    try:
        lat = asyncio.run(_latencies(net, url, args.n, not args.no_semantic, args.semantic_n))
        pipe = asyncio.run(_pipeline_latencies(net, url, min(args.n, 1000)))
        zipf = asyncio.run(
            _zipf(
                net,
                url,
                requests=args.requests,
                distinct=args.distinct,
                s=args.zipf_s,
                concurrency=args.concurrency,
            )
        )
    finally:
        if proc is not None:
            proc.kill()
            proc.wait(5)
    model_p50 = lat["model_call"]["p50_ms"]
    sem = lat.pop("semantic_lookup", None)
    targets = _targets(lat, pipe, sem, how)
    result = {
        "benchmark": "cache",
        "model": "torch MLP 64-256-256-10, batch 1, CPU",
        "redis": {"url": url, "how": how},
        "latency": lat,
        "hit_speedup_vs_model_p50": {
            k: round(model_p50 / v["p50_ms"], 4) for k, v in lat.items() if k != "model_call"
        },
        "pipeline_latency": pipe,
        "semantic_lookup": sem or "skipped: --no-semantic",
        "zipf": zipf,
        "targets": targets,
        "env": _env(),
        "note": "latency: ResultCache called directly; pipeline_latency: through Pipeline.infer "
                "(validation, catalog, cache, response), in-process, no HTTP",
        # Skipped targets (strings) neither pass nor fail; every measured one must hold.
        "meets_targets": all(v for v in targets.values() if isinstance(v, bool)),
    }
    return emit(result, args.json)


if __name__ == "__main__":
    main()
