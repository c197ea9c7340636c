"""What request tracing (``telemetry.otlp_endpoint``, router.tracing) costs a request, without
Ray: ``Pipeline.infer`` over a ``LocalPoolClient``, per request, in three arms built as the
ingress builds them:

* ``off``: no endpoint, the plain ``Pipeline`` (what every deployment without tracing runs);
* ``unsampled``: a ``TracedPipeline`` with ``sample_ratio`` 0 (on, this request left out);
* ``sampled``: ``sample_ratio`` 1, spans ended into a ``BatchSpanProcessor`` whose exporter
  drops them (the export thread's work is off the request path and not counted).

    python -m benchmarks.tracing_overhead --json out.json [--n 2000] [--rounds 7]

Each arm is timed on a cache hit (the cheapest request, where a fixed cost shows most) and on a
cache-bypassed request (a forward pass on the device thread); arms alternate round by round and
each figure is the median over rounds of the mean µs per request. Off must equal the
pipeline as it was before tracing existed: it is the same class and code path.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from benchmarks._output import emit


class _Drop(SpanExporter):
    """Counts and drops: the receiver is not what is measured."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


async def _run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from alerting.telemetry import Telemetry
    from pool._private.worker import DeviceWorker
    from pool.device import DeviceSpec
    from pool.host import ModelHost
    from pool.repository import ModelRepository
    from router.cache import CacheSettings, ResultCache
    from router.catalog import ModelCatalog, config_of
    from router.pipeline import Pipeline
    from router.pool_client import LocalPoolClient
    from router.schemas import CacheControl, InferenceRequest
    from router.tracing import RequestTracer, TracedPipeline

    host = ModelHost(ModelRepository(root / "repo", settle_s=0), DeviceWorker(
        DeviceSpec(kind="cpu", memory_budget_bytes=64 << 20)))
    await host.sync()

    async def fetch():
        return host.index()

    exporters: dict[str, _Drop] = {}
    pipes: dict[str, Pipeline] = {}
    telemetries = []
    for arm in ("off", "unsampled", "sampled"):
        catalog = ModelCatalog(fetch)
        await catalog.refresh()
        kw: dict[str, Any] = {"cache": ResultCache(CacheSettings())}
        if arm == "off":
            pipes[arm] = Pipeline(catalog, {"cpu": LocalPoolClient(host)}, **kw)
            continue
        exporters[arm] = _Drop()
        t = Telemetry(span_processor=BatchSpanProcessor(exporters[arm]),
                      sample_ratio=0.0 if arm == "unsampled" else 1.0)
        telemetries.append(t)
        pipes[arm] = TracedPipeline(catalog, {"cpu": LocalPoolClient(host)},
                                    tracer=RequestTracer(t.tracer), **kw)
    spec = config_of(host.index()[args.model]).inputs[0]
    x = np.random.default_rng(0).standard_normal((1, *spec.shape)).astype(np.float32)
    bypass = CacheControl(skip_read=True, skip_write=True)
    kinds = {"hit": CacheControl(), "bypass": bypass}

    async def mean_us(pipe: Pipeline, cache: CacheControl, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            req = InferenceRequest(model=args.model, inputs={spec.name: x}, cache=cache)
            req.arrival_s = time.monotonic()  # as the edge or the handle method stamps it
            await pipe.infer(req)
        return (time.perf_counter() - t0) / n * 1e6

    for pipe in pipes.values():  # warm up every arm and fill each one's cache
        for cache in kinds.values():
            await mean_us(pipe, cache, 300)
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for kind, cache in kinds.items():
            for arm, pipe in pipes.items():
                samples.setdefault((kind, arm), []).append(await mean_us(pipe, cache, args.n))
    for t in telemetries:
        t.tracer_provider.shutdown()
    await host.worker.close()
    out: dict[str, Any] = {"benchmark": "tracing_overhead", "model": args.model, "n": args.n,
                           "rounds": args.rounds}
    for kind in kinds:
        med = {arm: round(statistics.median(samples[(kind, arm)]), 2) for arm in pipes}
        out[kind] = {"mean_us": med,
                     "unsampled_minus_off_us": round(med["unsampled"] - med["off"], 2),
                     "sampled_minus_off_us": round(med["sampled"] - med["off"], 2)}
    out["spans_exported"] = {arm: e.spans for arm, e in exporters.items()}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="digits-small")
    p.add_argument("--n", type=int, default=2000, help="requests per arm per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from deploy.demo import build_demo_repository

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build_demo_repository(root / "repo", only=[args.model])
        result = asyncio.run(_run(args, root))
    return emit(result, args.json)


if __name__ == "__main__":
    main()
