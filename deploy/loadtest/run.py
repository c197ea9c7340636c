"""Run a load test from a config: one run per rate (a sweep when several), then the verdict."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from deploy.loadtest._private.engine import request_realtime
from deploy.loadtest._private.floor import measure_floor
from deploy.loadtest._private.plan import build_plan
from deploy.loadtest._private.progress import progress_bar
from deploy.loadtest._private.runner import RunProgress, Sample, run_open_loop
from deploy.loadtest._private.stats import RunHistograms, find_knee, summarize_run
from deploy.loadtest._private.workers import run_http
from deploy.loadtest.config import LoadTestConfig
from deploy.loadtest.grpc_target import GrpcTarget
from deploy.loadtest.handle import HandleTarget, connect_app
from deploy.loadtest.target import Target

__all__ = ["LoadTestResult", "run_loadtest"]


@dataclass(slots=True)
class LoadTestResult:
    """Figures of every run, the raw samples (for plots) and the sweep verdict."""

    config: LoadTestConfig
    runs: list[dict[str, Any]]
    samples: list[list[Sample]] = field(repr=False)
    knee: dict[str, Any] | None = None
    floor: dict[str, Any] | None = None

    @property
    def is_sweep(self) -> bool:
        return len(self.runs) > 1

    @property
    def ok(self) -> bool:
        """Single run: every SLO met. Sweep: the lowest rate met its SLOs (a knee was found)."""
        if self.is_sweep:
            return bool(self.knee and self.knee["slo_knee_rps"] is not None)
        return bool(self.runs and self.runs[0]["slo_ok"])

    def to_dict(self) -> dict[str, Any]:
        """Everything for the JSON report."""
        return {
            "name": self.config.name,
            "config": self.config.model_dump(mode="json"),
            "ok": self.ok,
            "sweep": self.is_sweep,
            "knee": self.knee,
            "floor": self.floor,
            "runs": self.runs,
        }


def _warn(stream: TextIO, run: dict[str, Any]) -> None:
    gen = run["generator"]
    if gen["behind"]:
        wins = ", ".join(f"{w:g}s" for w in gen["behind_windows"]) or "none in particular"
        stream.write(f"WARNING: load generator fell behind at {run['target_rps']:g} rps: "
                     f"send lag p99 {gen['lag_ms']['p99']:.1f} ms, max {gen['lag_ms']['max']:.1f} "
                     f"ms, {gen['late_sends']} sends later than {gen['lag_warn_ms']:g} ms "
                     f"(windows starting at {wins}); latencies include this lag\n")
    if not run["stability"]["stable"]:
        stream.write(f"WARNING: run at {run['target_rps']:g} rps not stable: "
                     f"{run['stability']['reason']}\n")


async def run_loadtest(
    cfg: LoadTestConfig,
    target: Target | None = None,
    *,
    progress: bool | None = None,
    stream: TextIO = sys.stderr,
    clock: Callable[[], float] = time.perf_counter,
    workers: int | None = None,
    floor: bool = False,
) -> LoadTestResult:
    """Run every rate of ``cfg``.

    ``target`` given (any ``Target``), ``cfg.target.app`` or ``cfg.target.grpc``: in this
    process. Otherwise HTTP to
    ``cfg.target.url`` from ``workers`` generator processes (``cfg.workers``, else one per core).
    ``floor=True`` first measures the tool's own floor at the highest rate (see
    ``measure_floor``). ``progress=None`` draws the bar only when ``stream`` is a TTY.
    """
    scheduling = "normal"
    if target is None and cfg.target.app is not None:
        target = HandleTarget(connect_app(cfg.target.app))
        # This process is then the tool (a Ray driver of its own): its event loop's thread
        # wakes on schedule like the HTTP workers (Ray's own threads keep their policy).
        scheduling = request_realtime() if cfg.realtime else "normal"
    elif target is None and cfg.target.grpc is not None:
        target = GrpcTarget(cfg.target.grpc, timeout_s=cfg.target.timeout_s,
                            max_connections=cfg.target.max_connections)
        scheduling = request_realtime() if cfg.realtime else "normal"
    n_workers = 1 if target is not None else (workers or cfg.workers or os.cpu_count() or 1)
    floor_fig = await measure_floor(cfg, workers=n_workers, in_process=target is not None) \
        if floor else None
    runs: list[dict[str, Any]] = []
    all_samples: list[list[Sample]] = []
    for i, rate in enumerate(cfg.arrival.rate_list):
        prog = RunProgress(total=len(build_plan(cfg, rate, run_index=i)), scheduling=scheduling)
        async with progress_bar(prog, label=f"{rate:g} rps", stream=stream, enabled=progress):
            samples, hists = await _one_rate(cfg, target, rate, i, n_workers, prog, clock)
        run = summarize_run(samples, cfg=cfg, rate=rate, hists=hists)
        run["generator"]["workers"] = n_workers
        run["generator"]["scheduling"] = prog.scheduling
        _warn(stream, run)
        runs.append(run)
        all_samples.append(samples)
    knee = None
    if len(runs) > 1:
        knee = find_knee(runs, knee_factor=cfg.knee_factor,
                         min_ratio=cfg.slo.min_throughput_ratio or 0.95)
    return LoadTestResult(config=cfg, runs=runs, samples=all_samples, knee=knee, floor=floor_fig)


async def _one_rate(cfg: LoadTestConfig, target: Target | None, rate: float, i: int,
                    workers: int, prog: RunProgress, clock: Callable[[], float],
                    ) -> tuple[list[Sample], RunHistograms | None]:
    if target is None:
        return await run_http(cfg, rate, i, workers=workers, progress=prog)
    samples = await run_open_loop(target, build_plan(cfg, rate, run_index=i),
                                  max_in_flight=cfg.max_in_flight,
                                  lanes=cfg.target.max_connections,
                                  timeout_s=cfg.target.timeout_s, clock=clock, progress=prog)
    return samples, None
