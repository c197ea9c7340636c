"""The tool's own floor: the same generator against a null server that answers at once.

What a load test reports is the service's latency plus the tool's (encoding, the client, the
event loops, loopback, scheduling on a busy machine). Against the null server the service part
is ~0, so the latency measured there is what the tool adds, and the send lag says whether the
tool could hold the rate at all. Every report carries this beside its figures.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from typing import Any

from deploy.loadtest._private.engine import RunProgress
from deploy.loadtest._private.grpc_null import null_grpc
from deploy.loadtest._private.nullserver import null_server
from deploy.loadtest._private.plan import build_plan
from deploy.loadtest._private.runner import run_open_loop
from deploy.loadtest._private.stats import summarize_run
from deploy.loadtest._private.workers import run_http
from deploy.loadtest.config import LoadTestConfig
from deploy.loadtest.grpc_target import GrpcTarget
from deploy.loadtest.target import CallableTarget, LoadRequest, Outcome

__all__ = ["LAG_LIMIT_MS", "freeze", "measure_floor", "null_config", "run_null"]

# The schedule-keeping target: send lag p99 at most this.
LAG_LIMIT_MS = 2.0
_FLOOR_S = 2.0
_FLOOR_WARMUP_S = 0.5


def null_config(cfg: LoadTestConfig, *, url: str, rate: float, duration_s: float,
                warmup_s: float) -> LoadTestConfig:
    """``cfg`` (same payloads, mix, arrivals, connections) aimed at ``url`` at one ``rate``."""
    raw = cfg.model_dump(mode="json")
    raw["target"] = {**raw["target"], "url": url, "app": None, "grpc": None}
    raw["arrival"] = {"process": cfg.arrival.process, "rate": rate, "seed": cfg.arrival.seed}
    raw.update(duration_s=duration_s, warmup_s=warmup_s, slo={},
               stability={"window_s": duration_s / 2, "windows": 2, "tolerance": 1.0})
    return LoadTestConfig.model_validate(raw)


async def run_null(cfg: LoadTestConfig, *, workers: int, url: str, rate: float,
                   duration_s: float, warmup_s: float = _FLOOR_WARMUP_S,
                   progress: RunProgress | None = None) -> dict[str, Any]:
    """One run of ``cfg``'s traffic at ``rate`` against the null server at ``url``."""
    ncfg = null_config(cfg, url=url, rate=rate, duration_s=duration_s, warmup_s=warmup_s)
    samples, hists = await run_http(ncfg, rate, 0, workers=workers,
                                    progress=progress or RunProgress(total=0))
    return summarize_run(samples, cfg=ncfg, rate=rate, hists=hists)


def floor_figures(run: dict[str, Any], *, workers: int, transport: str) -> dict[str, Any]:
    """The floor's summary of a run against the null server."""
    lat, lag = run["latency_ms"], run["generator"]["lag_ms"]
    held = ((lag["p99"] or 0.0) <= LAG_LIMIT_MS and run["errors"]["total"] == 0
            and run["throughput_ratio"] >= 0.999)
    return {
        "transport": transport, "rate_rps": run["target_rps"], "workers": workers,
        "requests": run["planned"],
        "added_ms": {k: lat[k] for k in ("p50", "p90", "p99", "max")},
        "lag_ms": {k: lag[k] for k in ("p50", "p99", "max")},
        "lag_limit_ms": LAG_LIMIT_MS, "held": held, "errors": run["errors"]["by_class"],
    }


async def measure_floor(cfg: LoadTestConfig, *, workers: int, in_process: bool,
                        rate: float | None = None) -> dict[str, Any]:
    """The tool's added latency and send lag at ``rate`` (default: the highest configured)
    with this config's traffic, against a null target: the null server in another process for
    HTTP, a null gRPC server in another process for gRPC (the same client: its cost is in
    it), an instant in-process target for a handle target (the engine's cost; the Ray
    handle's own cost is not in it)."""
    rate = rate or max(cfg.arrival.rate_list)
    ncfg = null_config(cfg, url="http://127.0.0.1:1", rate=rate, duration_s=_FLOOR_S,
                       warmup_s=_FLOOR_WARMUP_S)
    if cfg.target.grpc is not None:  # the same gRPC client against a null gRPC server
        with null_grpc() as address:
            target = GrpcTarget(address, timeout_s=cfg.target.timeout_s,
                                max_connections=cfg.target.max_connections)
            try:
                samples = await run_open_loop(target, build_plan(ncfg, rate),
                                              lanes=cfg.target.max_connections)
            finally:
                await target.aclose()
        return floor_figures(summarize_run(samples, cfg=ncfg, rate=rate), workers=1,
                             transport="grpc")
    if not in_process:
        with null_server() as (_, url):
            run = await run_null(cfg, workers=workers, url=url, rate=rate, duration_s=_FLOOR_S)
        return floor_figures(run, workers=workers, transport="http")

    async def instant(req: LoadRequest) -> Outcome:
        return Outcome(status=200)

    samples = await run_open_loop(CallableTarget(instant), build_plan(ncfg, rate),
                                  lanes=cfg.target.max_connections)
    run = summarize_run(samples, cfg=ncfg, rate=rate)
    return floor_figures(run, workers=1, transport="in-process (engine only)")


async def freeze(proc: subprocess.Popen[bytes], progress: RunProgress, *, at_s: float,
                 for_s: float) -> dict[str, float]:
    """SIGSTOP ``proc`` ``at_s`` after the run's start (``progress.started_at``, set when the
    generator starts) for ``for_s``; returns when it was stopped and resumed, in seconds from
    the run's start: read right after SIGSTOP and right before SIGCONT, so the server was
    certainly frozen over the whole interval returned."""
    while progress.started_at == 0.0:
        await asyncio.sleep(0.01)
    t0 = progress.started_at
    await asyncio.sleep(max(0.0, t0 + at_s - time.perf_counter()))
    os.kill(proc.pid, signal.SIGSTOP)
    stopped = time.perf_counter() - t0  # after the signal: it was stopped by then
    try:
        await asyncio.sleep(max(0.0, t0 + at_s + for_s - time.perf_counter()))
    finally:
        resumed = time.perf_counter() - t0  # before the signal: it cannot have run earlier
        os.kill(proc.pid, signal.SIGCONT)
    return {"stopped_s": stopped, "resumed_s": resumed}
