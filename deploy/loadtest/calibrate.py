"""``timeshare loadtest --calibrate``: how much the tool itself adds, and how fast it can go.

Against the built-in null KServe-v2 server (its own process, answers at once):

1. **Added latency** at a moderate rate: the latency the tool reports when the service takes ~0.
2. **Highest rate held**: a ladder of rates, each held when the send lag p99 stays within
   ``LAG_LIMIT_MS`` with no error and every request answered.
3. **A 2 s stall**: the null server is frozen (SIGSTOP) for 2 s in a run at ``stall_rps``; the
   generator must keep its schedule through the stall and the burst of answers after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from deploy.loadtest._private.engine import RunProgress
from deploy.loadtest._private.floor import LAG_LIMIT_MS, floor_figures, freeze, run_null
from deploy.loadtest._private.nullserver import null_server
from deploy.loadtest.config import LoadTestConfig

__all__ = ["calibrate", "calibration_markdown", "write_calibration"]

LADDER_RPS = (1000, 2000, 3000, 4000, 6000, 8000, 12000, 16000)


def traffic(url: str = "http://127.0.0.1:1") -> LoadTestConfig:
    """The calibration's traffic: Poisson arrivals of 64-float requests (the demo's shape)."""
    return LoadTestConfig.model_validate({
        "name": "calibration", "target": {"url": url}, "models": [{"name": "null"}],
        "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 64],
                    "random": {"low": 0, "high": 16}}],
        "arrival": {"process": "poisson", "rate": 100, "seed": 1}, "duration_s": 1,
    })


async def calibrate(*, workers: int, floor_rps: float = 500.0, step_s: float = 3.0,
                    stall_rps: float = 2000.0, ladder: tuple[int, ...] = LADDER_RPS,
                    ) -> dict[str, Any]:
    """Run the three measurements; returns a JSON-ready dict (see the module docstring)."""
    cfg = traffic()
    out: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_avg_1m_before": os.getloadavg()[0]},
        "workers": workers, "lag_limit_ms": LAG_LIMIT_MS,
    }
    with null_server() as (proc, url):
        run = await run_null(cfg, workers=workers, url=url, rate=floor_rps, duration_s=step_s)
        out["floor"] = floor_figures(run, workers=workers, transport="http")
        steps = []
        for rate in ladder:
            run = await run_null(cfg, workers=workers, url=url, rate=rate, duration_s=step_s)
            steps.append(floor_figures(run, workers=workers, transport="http"))
            if not steps[-1]["held"]:
                break
        held = [s["rate_rps"] for s in steps if s["held"]]
        out["ladder"] = steps
        out["max_held_rps"] = max(held) if held else None
        out["ladder_top_held"] = bool(steps[-1]["held"])  # then the limit lies higher
        out["stall"] = await _stall_run(cfg, proc, url, workers=workers, rate=stall_rps)
    out["meets_targets"] = bool(
        (out["floor"]["added_ms"]["p50"] or 99) <= 1.0
        and (out["max_held_rps"] or 0) >= 2000 and out["stall"]["held"])
    return out


async def _stall_run(cfg: LoadTestConfig, proc: Any, url: str, *, workers: int,
                     rate: float) -> dict[str, Any]:
    prog = RunProgress(total=0)
    frozen = asyncio.create_task(freeze(proc, prog, at_s=2.5, for_s=2.0))
    run = await run_null(cfg, workers=workers, url=url, rate=rate, duration_s=6.0,
                         progress=prog)
    fig = floor_figures(run, workers=workers, transport="http")
    fig["freeze"] = await frozen
    fig["latency_ms"] = {k: run["latency_ms"][k] for k in ("p50", "p90", "p99", "max")}
    fig["waited_for_connection"] = run["generator"]["waited_for_connection"]
    return fig


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def calibration_markdown(c: dict[str, Any]) -> str:
    """A short Markdown page of a calibration result."""
    f, st = c["floor"], c["stall"]
    lines = [
        "# Load-test tool calibration", "",
        (f"Taken {c['when']} on {c['machine']['cpus']} CPUs (1-min load average before: "
        f"{c['machine']['load_avg_1m_before']:.2f}), {c['workers']} generator processes, against "
        "the built-in null KServe-v2 server (answers at once, its own process). "
        f"**Targets {'met' if c['meets_targets'] else 'NOT met'}** (added p50 ≤ 1 ms; "
        f"≥ 2,000 req/s with send-lag p99 ≤ {c['lag_limit_ms']:g} ms, also across a 2 s stall)."),
        "",
        (f"- **Added latency** at {f['rate_rps']:g} req/s ({f['requests']} requests): p50 "
        f"{_ms(f['added_ms']['p50'])} ms, p90 {_ms(f['added_ms']['p90'])} ms, p99 "
        f"{_ms(f['added_ms']['p99'])} ms, max {_ms(f['added_ms']['max'])} ms."),
        (f"- **Highest rate held** (send-lag p99 ≤ {c['lag_limit_ms']:g} ms, no error, every "
        f"request answered): {c['max_held_rps'] or 'none'} req/s."),
        (f"- **2 s stall** at {st['rate_rps']:g} req/s (server SIGSTOPped from "
        f"{st['freeze']['stopped_s']:.2f} s to {st['freeze']['resumed_s']:.2f} s): send lag p99 "
        f"{_ms(st['lag_ms']['p99'])} ms, max {_ms(st['lag_ms']['max'])} ms — "
        f"{'held' if st['held'] else 'NOT held'}; latency p50 {_ms(st['latency_ms']['p50'])} "
        f"ms, p99 {_ms(st['latency_ms']['p99'])} ms, max {_ms(st['latency_ms']['max'])} ms; "
        f"{st['waited_for_connection']} requests waited for a connection."), "",
        ("| offered req/s | requests | added p50 ms | added p99 ms | lag p50 ms | lag p99 ms | "
        "lag max ms | held |"), "|---|---|---|---|---|---|---|---|",
    ]
    for s in c["ladder"]:
        lines.append(f"| {s['rate_rps']:g} | {s['requests']} | {_ms(s['added_ms']['p50'])} | "
                     f"{_ms(s['added_ms']['p99'])} | {_ms(s['lag_ms']['p50'])} | "
                     f"{_ms(s['lag_ms']['p99'])} | {_ms(s['lag_ms']['max'])} | "
                     f"{'yes' if s['held'] else 'no'} |")
    return "\n".join(lines) + "\n"


def write_calibration(c: dict[str, Any], out_dir: str | Path) -> Path:
    """Write ``calibration.json`` and ``calibration.md`` into ``out_dir``; returns the .md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps(c, indent=2))
    md = out / "calibration.md"
    md.write_text(calibration_markdown(c))
    return md
