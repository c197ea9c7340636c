"""``timeshare loadtest CONFIG.yaml [--out DIR]``: run a load test and write its report.
``timeshare loadtest --calibrate [--out DIR]``: measure the tool's own floor on this machine.

Exit status: 0 every SLO met (a sweep: the lowest rate met them; calibration: its targets met),
1 an SLO (or a calibration target) failed, 2 bad usage or config.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from deploy.loadtest._private.engine import run_fast
from deploy.loadtest.calibrate import calibrate, write_calibration
from deploy.loadtest.config import LoadTestConfig, TargetConfig, load_config
from deploy.loadtest.report import floor_line, write_report
from deploy.loadtest.run import run_loadtest

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="timeshare loadtest",
        description="Open-loop load test with a Markdown/JSON report; exits 1 if an SLO fails.",
    )
    p.add_argument("config", nargs="?",
                   help="load-test YAML config, e.g. deploy/loadtest/demo.yaml")
    p.add_argument("--out", default=None,
                   help="report folder (default: loadtest-<name> or loadtest-calibration)")
    p.add_argument("--url", default=None, help="override target.url of the config")
    p.add_argument("--workers", type=int, default=None,
                   help="generator processes (default: the config's workers, else one per core)")
    p.add_argument("--calibrate", action="store_true",
                   help="measure the tool's added latency and highest held rate against a "
                   "built-in null server, instead of running a config")
    p.add_argument("--no-floor", dest="floor", action="store_false",
                   help="skip the short null-server run that states the tool's floor in the "
                   "report")
    bar = p.add_mutually_exclusive_group()
    bar.add_argument("--progress", dest="progress", action="store_true", default=None,
                     help="always draw the progress bar")
    bar.add_argument("--no-progress", dest="progress", action="store_false",
                     help="never draw the progress bar (default: only on a TTY)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    p = _parser()
    args = p.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        p.error(f"--workers must be at least 1, got {args.workers}")
    if args.calibrate:
        return _calibrate(args)
    if not args.config:
        p.error("a config file is required (or --calibrate)")
    try:
        cfg = load_config(args.config)
        if args.url:
            cfg = _with_url(cfg, args.url)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(f"loadtest-{cfg.name}")
    try:
        # uvloop when installed: for a handle target this process is the generator.
        result = run_fast(run_loadtest(cfg, progress=args.progress, workers=args.workers,
                                          floor=args.floor))
    except ValueError as e:  # e.g. target.app not reachable
        print(f"error: {e}", file=sys.stderr)
        return 2
    paths = write_report(result, out)
    if result.floor:
        print(floor_line(result.floor))
    for r in result.runs:
        lat = r["latency_ms"]
        failed = [row["name"] for row in r["slo"] if not row["ok"]]
        print(f"{r['target_rps']:g} rps: {r['throughput_rps']:.1f} ok/s, p50 "
              f"{_ms(lat['p50'])} p99 {_ms(lat['p99'])} max {_ms(lat['max'])}, errors "
              f"{r['errors']['rate']:.2%}, degraded {r['shares']['degraded']:.1%}"
              + (f" — SLO FAILED: {', '.join(failed)}" if failed else ""))
    if result.knee:
        k = result.knee
        print(f"knee: SLOs met up to {_rps(k['slo_knee_rps'])}; latency turns up at "
              f"{_rps(k['latency_knee_rps'])}")
    print(f"report: {paths.markdown} (figures: {paths.json})")
    return 0 if result.ok else 1


def _calibrate(args: argparse.Namespace) -> int:
    workers = args.workers or os.cpu_count() or 1
    result = run_fast(calibrate(workers=workers))
    md = write_calibration(result, Path(args.out or "loadtest-calibration"))
    print(md.read_text())
    print(f"written: {md} and {md.with_suffix('.json')}")
    return 0 if result["meets_targets"] else 1


def _with_url(cfg: LoadTestConfig, url: str) -> LoadTestConfig:
    """``cfg`` with ``target.url`` replaced (validated like the file's)."""
    target = TargetConfig.model_validate({**cfg.target.model_dump(), "url": url, "app": None,
                                          "grpc": None})
    return cfg.model_copy(update={"target": target})


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}ms"


def _rps(v: float | None) -> str:
    return "no rate" if v is None else f"{v:g} rps"
