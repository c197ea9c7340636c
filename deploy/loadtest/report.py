"""Write a load-test result: ``report.md`` with PNG plots, and ``report.json`` with every figure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploy.loadtest.histogram import PERCENTILES
from deploy.loadtest.run import LoadTestResult

__all__ = ["ReportPaths", "floor_line", "write_report"]

_LAT_KEYS = [*PERCENTILES, "max"]


@dataclass(frozen=True, slots=True)
class ReportPaths:
    """Files written by ``write_report``."""

    markdown: Path
    json: Path
    plots: tuple[Path, ...]


def _f(v: float | None, fmt: str = ".1f") -> str:
    return "–" if v is None else format(v, fmt)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


def _pyplot() -> Any:
    """matplotlib on the Agg backend (files only, no display), imported only when plotting so
    that importing this package (e.g. for the ``timeshare`` command line) stays fast."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _log_ms_axis(ax: Any) -> None:
    """Log-scale latency axis with plain numbers (10, 20, 50) instead of 2x10^1."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _latency_plot(result: LoadTestResult, i: int, path: Path) -> None:
    run, samples, cfg = result.runs[i], result.samples[i], result.config
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4))
    ok = [s for s in samples if s.outcome.ok and not s.outcome.degraded]
    deg = [s for s in samples if s.outcome.ok and s.outcome.degraded]
    err = [s for s in samples if not s.outcome.ok]
    ax.scatter([s.planned_s for s in ok], [s.latency_s * 1e3 for s in ok], s=4, label="ok")
    if deg:
        ax.scatter([s.planned_s for s in deg], [s.latency_s * 1e3 for s in deg], s=6,
                   color="tab:orange", label="degraded")
    if err:
        ax.scatter([s.planned_s for s in err], [max(s.latency_s * 1e3, 0.01) for s in err],
                   s=12, marker="x", color="tab:red", label="error")
    for w in run["windows"]:
        if w["p99_ms"] is not None:
            ax.hlines(w["p99_ms"], w["start_s"], w["start_s"] + cfg.stability.window_s,
                      color="black", linewidth=1.5)
    ax.plot([], [], color="black", label="window p99")
    if cfg.warmup_s > 0:
        ax.axvspan(0, cfg.warmup_s, color="grey", alpha=0.2, label="warm-up")
    if cfg.slo.p99_ms:
        ax.axhline(cfg.slo.p99_ms, color="tab:red", linestyle=":", label="p99 SLO")
    if run["generator"]["behind"]:
        ax.set_title("generator fell behind: latencies include its send lag", loc="right",
                     color="tab:red", fontsize=8)
    _log_ms_axis(ax)
    ax.set_xlabel("planned send time (s)")
    ax.set_ylabel("latency from planned send (ms)")
    ax.set_title(f"Latency over time at {run['target_rps']:g} rps", loc="left")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _sweep_plot(result: LoadTestResult, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    tp = [r["throughput_rps"] for r in result.runs]
    for key in ("p50", "p90", "p99"):
        ax.plot(tp, [r["latency_ms"][key] or float("nan") for r in result.runs], marker="o",
                label=key)
    for r in result.runs:
        ax.annotate(f"{r['target_rps']:g}", (r["throughput_rps"], r["latency_ms"]["p99"] or 0),
                    fontsize=7, textcoords="offset points", xytext=(3, 3))
    knee = result.knee or {}
    if knee.get("slo_knee_rps") is not None:
        ax.axvline(next(r["throughput_rps"] for r in result.runs
                        if r["target_rps"] == knee["slo_knee_rps"]),
                   color="tab:green", linestyle="--", label="SLO knee")
    if result.config.slo.p99_ms:
        ax.axhline(result.config.slo.p99_ms, color="tab:red", linestyle=":", label="p99 SLO")
    _log_ms_axis(ax)
    ax.set_xlabel("achieved throughput (ok responses/s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Throughput vs latency (labels: target rps)", loc="left")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def floor_line(floor: dict[str, Any] | None) -> str:
    """One sentence stating the tool's own floor (what it adds to every latency)."""
    if not floor:
        return ("Tool floor: not measured for this report (run without --no-floor, or see "
                "`timeshare loadtest --calibrate`).")
    a, lag = floor["added_ms"], floor["lag_ms"]
    return (f"Tool floor ({floor['transport']}, same traffic at {floor['rate_rps']:g} req/s "
            f"against a null server, {floor['workers']} generator process(es), measured just "
            f"before the runs): the tool adds p50 {_f(a['p50'], '.2f')} ms, p99 "
            f"{_f(a['p99'], '.2f')} ms to every latency; send lag p99 {_f(lag['p99'], '.2f')} ms "
            f"— {'rate held' if floor['held'] else 'rate NOT held by the tool itself'}.")


def _overview(result: LoadTestResult) -> list[str]:
    lines = ["| target rps | planned | ok/s | ratio | " + " | ".join(f"{k} ms" for k in _LAT_KEYS)
             + " | errors | degraded | stable | SLO |",
             "|" + "---|" * (len(_LAT_KEYS) + 8)]
    for r in result.runs:
        lat = r["latency_ms"]
        lines.append(
            f"| {r['target_rps']:g} | {r['planned']} | {r['throughput_rps']:.1f} | "
            f"{r['throughput_ratio']:.3f} | " + " | ".join(_f(lat[k]) for k in _LAT_KEYS)
            + f" | {_pct(r['errors']['rate'])} | {_pct(r['shares']['degraded'])} | "
            f"{'yes' if r['stability']['stable'] else 'no'} | {'pass' if r['slo_ok'] else 'FAIL'} |"
        )
    return lines


def _groups(title: str, groups: dict[str, Any]) -> list[str]:
    lines = [f"**{title}**", "", "| name | requests | ok/s | errors | degraded | p50 | p99 | max |",
             "|---|---|---|---|---|---|---|---|"]
    for name, g in groups.items():
        lat = g["latency_ms"]
        lines.append(f"| {name} | {g['requests']} | {g['throughput_rps']:.1f} | "
                     f"{_pct(g['error_rate'])} | {_pct(g['degraded_share'])} | {_f(lat['p50'])} | "
                     f"{_f(lat['p99'])} | {_f(lat['max'])} |")
    return lines + [""]


def _shares_line(name: str, shares: dict[str, float]) -> str:
    body = ", ".join(f"{k} {v:.1%}" for k, v in shares.items()) or "–"
    return f"- {name}: {body}"


def _run_section(result: LoadTestResult, i: int, plot: str) -> list[str]:
    r = result.runs[i]
    gen, st = r["generator"], r["stability"]
    lines = [f"## Run at {r['target_rps']:g} rps", "", f"![latency over time]({plot})", "",
             (f"Planned {r['planned']} measured requests ({r['planned_rps']:.1f}/s realised by the "
             f"arrival process), {r['ok']} answered ok ({r['throughput_rps']:.1f}/s)."), ""]
    lines.append("**SLOs**")
    lines.append("")
    lines += ["| objective | limit | measured | |", "|---|---|---|---|"]
    for row in r["slo"]:
        lines.append(f"| {row['name']} | {row['limit']:g} | {_f(row['value'], '.4g')} | "
                     f"{'pass' if row['ok'] else 'FAIL'} |")
    lines += ["", "**Errors by class**", ""]
    lines += [f"- {k}: {v}" for k, v in r["errors"]["by_class"].items()] or ["- none"]
    lines += ["", "**Answers** (shares of ok responses)", "",
              f"- degraded: {r['shares']['degraded']:.1%}",
              _shares_line("cache", r["shares"]["cache"]),
              _shares_line("served_by", r["shares"]["served_by"]),
              _shares_line("fallback (served_by of degraded answers)",
                           r["shares"]["fallback_served_by"]),
              _shares_line("degraded reasons", r["shares"]["degraded_reason"]), ""]
    lines += _groups("Per model", r["by_model"]) + _groups("Per priority", r["by_priority"])
    lines += ["**Generator**", "", *_generator_lines(gen),
              (f"- service time (actual send to answer) p50 {_f(r['service_ms']['p50'])} ms, "
              f"p99 {_f(r['service_ms']['p99'])} ms"), "",
              f"**Stability**: {'stable' if st['stable'] else 'NOT stable — ' + st['reason']}", "",
              "| window start (s) | requests | ok/s | p99 ms |", "|---|---|---|---|"]
    for w in r["windows"]:
        lines.append(f"| {w['start_s']:g} | {w['requests']} | {w['throughput_rps']:.1f} | "
                     f"{_f(w['p99_ms'])} |")
    return lines + [""]


def _generator_lines(gen: dict[str, Any]) -> list[str]:
    lag, wait = gen["lag_ms"], gen["connection_wait_ms"]
    behind = ""
    if gen["behind"]:
        wins = ", ".join(f"{w:g} s" for w in gen["behind_windows"]) or "spread over the run"
        behind = f" — **generator fell behind** (windows starting at {wins})"
    return [
        f"- {gen.get('workers', 1)} generator process(es) ({gen.get('scheduling', 'normal')} "
        f"scheduling); send lag p50 {_f(lag['p50'], '.2f')} "
        f"ms, p99 {_f(lag['p99'], '.2f')} ms, max {_f(lag['max'], '.2f')} ms; "
        f"{gen['late_sends']} sends later than {gen['lag_warn_ms']:g} ms" + behind,
        (f"- {gen['waited_for_connection']} requests waited for a free connection (p99 wait "
        f"{_f(wait['p99'])} ms, max {_f(wait['max'])} ms; included in their latency)"),
    ]


_HOW_TO_READ = [
    "## How to read this report", "",
    ("- **Latency** runs from each request's *planned* send time. The generator is open loop: it "
     "sends on schedule whether or not earlier requests have answered, so a server stall shows up "
     "in every request it delayed (a closed-loop client would send nothing while stalled and "
     "hide it: coordinated omission). Percentiles come from an HDR histogram (0.1% precision) "
     "over successful measured requests; warm-up requests are not counted."),
    ("- **ok/s** is successful answers per second of measured time; **ratio** is successful "
     "answers over planned requests (1.0 = kept up with the offered load). Poisson arrivals make "
     "the realised rate differ slightly from the target."),
    ("- **Errors by class**: `http_<status>` for error answers, an exception name (e.g. "
     "`ConnectError`, `ReadTimeout`) for transport failures, `generator_overload` when the "
     "generator's in-flight bound was hit."),
    ("- **Degraded / fallback / cache** shares come from the answers' `parameters` "
     "(`degraded`, `served_by`, `reason`, `cache`)."),
    ("- **Tool floor** (top of the report): the same traffic against a null server that "
     "answers at once, just before the runs; it is what the tool itself adds to each latency. "
     "`timeshare loadtest --calibrate` measures it in full, with the highest rate it holds."),
    ("- **Generator lag** is how late the generator itself acted on a planned send. When it "
     "fell behind, latencies include that lag and the load was not offered as planned: the "
     "windows it touched are named; use more `--workers`, a less busy machine or a lower rate. "
     "Waiting for a free connection is the server's backpressure, not lag: it counts in the "
     "latency. Requests still unanswered `timeout_s` after their planned time (also at the end "
     "of a run) are `Timeout` errors, never dropped."),
    ("- **Stability**: the measured period is cut into windows; a run is stable when the last "
     "windows agree on completion ratio and p99 within the tolerance (as Triton perf_analyzer "
     "does). An unstable run needs a longer duration before its figures are trusted."),
    ("- **Sweep**: the SLO knee is the highest rate at which this and every lower rate met the "
     "SLOs; latency turns up where p99 exceeds `knee_factor` times the lowest rate's p99 or "
     "answers fall behind plan. `report.json` holds every figure shown here."),
    "",
]


def write_report(result: LoadTestResult, out_dir: str | Path) -> ReportPaths:
    """Write ``report.md``, ``report.json`` and the plots into ``out_dir`` (created)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = result.config
    plots: list[Path] = []
    for i, r in enumerate(result.runs):
        p = out / f"latency_over_time_{r['target_rps']:g}rps.png"
        _latency_plot(result, i, p)
        plots.append(p)
    lines = [f"# Load test: {cfg.name}", "",
             f"**Verdict: {'PASS' if result.ok else 'FAIL'}** — target {cfg.target.described}, "
             f"{cfg.arrival.process} arrivals, {cfg.duration_s:g} s measured after "
             f"{cfg.warmup_s:g} s warm-up per rate, models "
             + ", ".join(f"{m.name} (weight {m.weight:g})" for m in cfg.models) + ".", "",
             ("Latency is measured from each request's *planned* send time (open loop, no "
             "coordinated omission); percentiles are over successful measured requests."), "",
             floor_line(result.floor), ""]
    lines += _overview(result) + [""]
    if result.is_sweep:
        sweep = out / "throughput_vs_latency.png"
        _sweep_plot(result, sweep)
        plots.append(sweep)
        k = result.knee or {}
        lines += ["## Sweep", "", f"![throughput vs latency]({sweep.name})", "",
                  (f"- highest rate meeting every SLO (SLO knee): "
                  f"{_f(k.get('slo_knee_rps'), 'g')} rps"),
                  f"- latency turns up (p99 > {k.get('knee_factor', 0):g}x the lowest rate's, or "
                  "completions fall behind plan) at: " + (
                      f"{k['latency_knee_rps']:g} rps" if k.get("latency_knee_rps") is not None
                      else "not within the swept rates"),
                  f"- max throughput: {_f(k.get('max_throughput_rps'))} ok/s", ""]
    for i in range(len(result.runs)):
        lines += _run_section(result, i, plots[i].name)
    lines += _HOW_TO_READ
    md = out / "report.md"
    md.write_text("\n".join(lines))
    js = out / "report.json"
    js.write_text(json.dumps(result.to_dict(), indent=2, default=str))
    return ReportPaths(markdown=md, json=js, plots=tuple(plots))
