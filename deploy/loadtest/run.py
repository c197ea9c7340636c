"""Run a load test from a config: one run per rate (a sweep when several), then the verdict."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from deploy.loadtest._private.plan import build_plan
from deploy.loadtest._private.progress import progress_bar
from deploy.loadtest._private.runner import RunProgress, Sample, run_open_loop
from deploy.loadtest._private.stats import find_knee, summarize_run
from deploy.loadtest.config import LoadTestConfig
from deploy.loadtest.target import HttpTarget, Target

__all__ = ["LoadTestResult", "run_loadtest"]


@dataclass(slots=True)
class LoadTestResult:
    """Figures of every run, the raw samples (for plots) and the sweep verdict."""

    config: LoadTestConfig
    runs: list[dict[str, Any]]
    samples: list[list[Sample]] = field(repr=False)
    knee: dict[str, Any] | None = None

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
            "runs": self.runs,
        }


def _warn(stream: TextIO, run: dict[str, Any]) -> None:
    gen = run["generator"]
    if gen["behind"]:
        stream.write(f"WARNING: load generator fell behind at {run['target_rps']:g} rps: "
                     f"send lag p99 {gen['lag_ms']['p99']:.1f} ms, max {gen['lag_ms']['max']:.1f} "
                     f"ms, {gen['late_sends']} sends later than {gen['lag_warn_ms']:g} ms; "
                     "latencies include this lag\n")
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
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> LoadTestResult:
    """Run every rate of ``cfg`` against ``target`` (an ``HttpTarget`` on ``cfg.target`` when
    None, closed at the end). ``progress=None`` draws the bar only when ``stream`` is a TTY."""
    own = target is None
    tgt: Target = target or HttpTarget(cfg.target.url, timeout_s=cfg.target.timeout_s,
                                       max_connections=cfg.target.max_connections)
    runs: list[dict[str, Any]] = []
    all_samples: list[list[Sample]] = []
    try:
        for i, rate in enumerate(cfg.arrival.rate_list):
            plan = build_plan(cfg, rate, run_index=i)
            prog = RunProgress(total=len(plan))
            label = f"{rate:g} rps"
            async with progress_bar(prog, label=label, stream=stream, enabled=progress):
                samples = await run_open_loop(tgt, plan, max_in_flight=cfg.max_in_flight,
                                              clock=clock, sleep=sleep, progress=prog)
            run = summarize_run(samples, cfg=cfg, rate=rate)
            _warn(stream, run)
            runs.append(run)
            all_samples.append(samples)
    finally:
        if own:
            await tgt.aclose()
    knee = None
    if len(runs) > 1:
        knee = find_knee(runs, knee_factor=cfg.knee_factor,
                         min_ratio=cfg.slo.min_throughput_ratio or 0.95)
    return LoadTestResult(config=cfg, runs=runs, samples=all_samples, knee=knee)
