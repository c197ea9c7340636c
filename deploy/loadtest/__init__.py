"""Open-loop load-test tool: ``timeshare loadtest CONFIG.yaml [--out DIR]``.

Requests go out on a planned schedule (constant or Poisson, one rate or a sweep) whatever the
server does, and latency runs from the planned send time, so stalls are never hidden
(no coordinated omission). A run produces a Markdown report with plots and a JSON file with every
figure; the exit status is non-zero when an SLO fails.

Programmatic use::

    cfg = load_config("deploy/loadtest/demo.yaml")
    result = await run_loadtest(cfg)            # or run_loadtest(cfg, MyTarget())
    write_report(result, "out/")
"""

from deploy.loadtest._private.runner import Sample, run_closed_loop, run_open_loop
from deploy.loadtest.cli import main
from deploy.loadtest.config import LoadTestConfig, load_config
from deploy.loadtest.histogram import LatencyHistogram
from deploy.loadtest.http_target import HttpTarget
from deploy.loadtest.report import ReportPaths, write_report
from deploy.loadtest.run import LoadTestResult, run_loadtest
from deploy.loadtest.target import (
    CallableTarget,
    LoadRequest,
    Outcome,
    Target,
    v2_body,
)

__all__ = [
    "CallableTarget",
    "HttpTarget",
    "LatencyHistogram",
    "LoadRequest",
    "LoadTestConfig",
    "LoadTestResult",
    "Outcome",
    "ReportPaths",
    "Sample",
    "Target",
    "load_config",
    "main",
    "run_closed_loop",
    "run_loadtest",
    "run_open_loop",
    "v2_body",
    "write_report",
]
