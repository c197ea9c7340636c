"""Figures of one run (and of a sweep) from its samples; pure functions, JSON-ready dicts.

Latency percentiles are over measured requests that succeeded (errors are counted separately,
so a fast 503 cannot make latency look better). Windows bucket requests by PLANNED send time so
the generator's own lateness cannot move a request into another window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from deploy.loadtest._private.runner import Sample
from deploy.loadtest.config import LoadTestConfig, SloConfig, StabilityConfig
from deploy.loadtest.histogram import LatencyHistogram

__all__ = [
    "RunHistograms", "evaluate_slo", "find_knee", "stability", "summarize_run", "windows",
]


@dataclass(slots=True)
class RunHistograms:
    """The headline histograms of one run (measured requests only). Built per generator process
    and merged exactly (``add``: same bucket layout, counts add), never by averaging percentiles.

    ``latency``/``service``: successful requests, from the planned / actual send. ``lag``: every
    request, the generator's own lateness. ``wait``: every request, time spent waiting for a free
    connection (part of its latency).
    """

    latency: LatencyHistogram
    service: LatencyHistogram
    lag: LatencyHistogram
    wait: LatencyHistogram

    @classmethod
    def of(cls, samples: Sequence[Sample]) -> RunHistograms:
        meas = [s for s in samples if s.measured]
        ok = [s for s in meas if s.outcome.ok]
        return cls(latency=LatencyHistogram(s.latency_s for s in ok),
                   service=LatencyHistogram(s.service_s for s in ok),
                   lag=LatencyHistogram(max(s.lag_s, 0.0) for s in meas),
                   wait=LatencyHistogram(s.wait_s for s in meas))

    def add(self, other: RunHistograms) -> None:
        for f in fields(self):
            getattr(self, f.name).add(getattr(other, f.name))

    def encode(self) -> dict[str, bytes]:
        return {f.name: getattr(self, f.name).encode() for f in fields(self)}

    @classmethod
    def decode(cls, data: dict[str, bytes]) -> RunHistograms:
        return cls(**{k: LatencyHistogram.decode(v) for k, v in data.items()})


def _shares(values: Sequence[str | None]) -> dict[str, float]:
    n = len(values)
    return {k: c / n for k, c in Counter(v or "none" for v in values).most_common()} if n else {}


def _group(samples: Sequence[Sample], duration_s: float) -> dict[str, Any]:
    ok = [s for s in samples if s.outcome.ok]
    n = len(samples)
    return {
        "requests": n,
        "ok": len(ok),
        "error_rate": (n - len(ok)) / n if n else 0.0,
        "throughput_rps": len(ok) / duration_s,
        "latency_ms": LatencyHistogram(s.latency_s for s in ok).summary_ms(),
        "degraded_share": sum(s.outcome.degraded for s in ok) / len(ok) if ok else 0.0,
    }


def _by(samples: Sequence[Sample], key: Callable[[Sample], str],
        duration_s: float) -> dict[str, Any]:
    groups: dict[str, list[Sample]] = {}
    for s in samples:
        groups.setdefault(key(s), []).append(s)
    return {k: _group(v, duration_s) for k, v in sorted(groups.items())}


def windows(samples: Sequence[Sample], *, start_s: float, duration_s: float,
            window_s: float, lag_warn_ms: float = 2.0) -> list[dict[str, Any]]:
    """Per-window requests, ok throughput, completion ratio, p99, send lag p99 and sends later
    than ``lag_warn_ms`` (complete windows only)."""
    out = []
    n_win = int(duration_s // window_s + 1e-9)
    for w in range(n_win):
        lo, hi = start_s + w * window_s, start_s + (w + 1) * window_s
        sel = [s for s in samples if lo <= s.planned_s < hi]
        ok = [s for s in sel if s.outcome.ok]
        out.append({
            "start_s": lo, "requests": len(sel), "throughput_rps": len(ok) / window_s,
            "ok_ratio": len(ok) / len(sel) if sel else 0.0,
            "p99_ms": LatencyHistogram(s.latency_s for s in ok).percentile_ms(99.0),
            "lag_p99_ms": LatencyHistogram(max(s.lag_s, 0.0) for s in sel).percentile_ms(99.0),
            "late_sends": sum(s.lag_s * 1000.0 > lag_warn_ms for s in sel),
        })
    return out


def _spread(values: list[float]) -> float:
    mean = float(np.mean(values))
    return max(abs(v - mean) for v in values) / mean if mean > 0 else float("inf")


def stability(wins: list[dict[str, Any]], cfg: StabilityConfig) -> dict[str, Any]:
    """perf_analyzer-style check: the last ``cfg.windows`` windows' completion ratio (throughput
    relative to what was planned, so Poisson noise in the offered load does not count) and p99
    all lie within ``cfg.tolerance`` of their mean."""
    if len(wins) < cfg.windows:
        return {"stable": False, "reason": f"only {len(wins)} complete windows of "
                f"{cfg.window_s:g}s, need {cfg.windows}; lengthen duration_s"}
    last = wins[-cfg.windows:]
    if any(w["p99_ms"] is None for w in last):
        return {"stable": False, "reason": "a window had no successful request"}
    tp = _spread([w["ok_ratio"] for w in last])
    p99 = _spread([w["p99_ms"] for w in last])
    ok = tp <= cfg.tolerance and p99 <= cfg.tolerance
    reason = "" if ok else (f"last {cfg.windows} windows differ by up to "
                            f"{tp:.0%} in throughput and {p99:.0%} in p99 "
                            f"(tolerance {cfg.tolerance:.0%})")
    return {"stable": ok, "throughput_spread": tp, "p99_spread": p99, "reason": reason}


def evaluate_slo(run: dict[str, Any], slo: SloConfig) -> list[dict[str, Any]]:
    """One row per objective that is set: name, limit, value, ok."""
    lat = run["latency_ms"]
    checks: list[tuple[str, float | None, float | None, bool]] = [
        ("p50_ms", slo.p50_ms, lat["p50"], False),
        ("p90_ms", slo.p90_ms, lat["p90"], False),
        ("p95_ms", slo.p95_ms, lat["p95"], False),
        ("p99_ms", slo.p99_ms, lat["p99"], False),
        ("p999_ms", slo.p999_ms, lat["p99.9"], False),
        ("max_ms", slo.max_ms, lat["max"], False),
        ("error_rate", slo.error_rate, run["errors"]["rate"], False),
        ("degraded_share", slo.degraded_share, run["shares"]["degraded"], False),
        ("min_throughput_ratio", slo.min_throughput_ratio, run["throughput_ratio"], True),
    ]
    rows = []
    for name, limit, value, at_least in checks:
        if limit is None:
            continue
        ok = value is not None and (value >= limit if at_least else value <= limit)
        rows.append({"name": name, "limit": limit, "value": value, "ok": ok})
    return rows


def _generator(meas: Sequence[Sample], hists: RunHistograms, wins: list[dict[str, Any]],
               cfg: LoadTestConfig, overload: int) -> dict[str, Any]:
    """How well the generator kept its schedule, and which windows its lateness touched."""
    lag_ms = hists.lag.summary_ms()
    late = sum(s.lag_s * 1000.0 > cfg.lag_warn_ms for s in meas)
    behind = (lag_ms["p99"] or 0.0) > cfg.lag_warn_ms or overload > 0
    return {
        "lag_ms": lag_ms, "late_sends": late, "lag_warn_ms": cfg.lag_warn_ms, "behind": behind,
        # A window's lag p99 over fewer than 100 sends is its maximum: one scheduling hiccup
        # would mark it. Behind takes at least two late sends (over 100 sends, a p99 past the
        # limit has them anyway).
        "behind_windows": [w["start_s"] for w in wins
                           if (w["lag_p99_ms"] or 0.0) > cfg.lag_warn_ms
                           and w["late_sends"] >= 2],
        "connection_wait_ms": hists.wait.summary_ms(),
        "waited_for_connection": sum(s.wait_s > 0.0005 for s in meas),
    }


def summarize_run(samples: Sequence[Sample], *, cfg: LoadTestConfig, rate: float,
                  hists: RunHistograms | None = None) -> dict[str, Any]:
    """All figures of one run at ``rate``. ``hists``: the merged histograms of the generator
    processes (built from ``samples`` when None; the same counts either way)."""
    dur = cfg.duration_s
    meas = [s for s in samples if s.measured]
    ok = [s for s in meas if s.outcome.ok]
    h = hists or RunHistograms.of(samples)
    if h.lag.count != len(meas) or h.latency.count != len(ok):
        raise ValueError(f"histograms hold {h.lag.count} requests ({h.latency.count} ok), "
                         f"samples {len(meas)} ({len(ok)} ok)")
    n = len(meas)
    errors = Counter(s.outcome.error for s in meas if s.outcome.error)
    degraded = [s for s in ok if s.outcome.degraded]
    wins = windows(samples, start_s=cfg.warmup_s, duration_s=dur,
                   window_s=cfg.stability.window_s, lag_warn_ms=cfg.lag_warn_ms)
    run: dict[str, Any] = {
        "target_rps": rate,
        "planned": n,
        "planned_rps": n / dur,
        "ok": len(ok),
        "throughput_rps": len(ok) / dur,
        "throughput_ratio": len(ok) / n if n else 0.0,
        "latency_ms": h.latency.summary_ms(),
        "service_ms": h.service.summary_ms(),
        "errors": {"total": sum(errors.values()), "rate": sum(errors.values()) / n if n else 0.0,
                   "by_class": dict(errors.most_common())},
        "shares": {
            "degraded": len(degraded) / len(ok) if ok else 0.0,
            "cache": _shares([s.outcome.cache for s in ok]),
            "served_by": _shares([s.outcome.served_by for s in ok]),
            "fallback_served_by": _shares([s.outcome.served_by for s in degraded]),
            "degraded_reason": _shares([s.outcome.reason for s in degraded]),
        },
        # Warm-up is there to absorb start-up costs (first connections, lazy imports): its lag
        # does not count against the measured run.
        "generator": _generator(meas, h, wins, cfg, errors.get("generator_overload", 0)),
        "by_model": _by(meas, lambda s: s.model, dur),
        "by_priority": _by(meas, lambda s: s.priority, dur),
        "windows": wins,
    }
    run["stability"] = stability(run["windows"], cfg.stability)
    run["slo"] = evaluate_slo(run, cfg.slo)
    run["slo_ok"] = all(r["ok"] for r in run["slo"])
    return run


def find_knee(runs: Sequence[dict[str, Any]], *, knee_factor: float,
              min_ratio: float) -> dict[str, Any]:
    """Sweep verdict over runs in increasing rate order.

    ``slo_knee_rps``: highest rate such that it and every lower rate met the SLOs (None if the
    lowest failed). ``latency_knee_rps``: first rate where latency turns up — p99 above
    ``knee_factor`` times the lowest rate's p99, or completions below ``min_ratio`` of plan.
    """
    slo_knee = None
    for r in runs:
        if not r["slo_ok"]:
            break
        slo_knee = r["target_rps"]
    base = runs[0]["latency_ms"]["p99"] if runs else None
    latency_knee = None
    for r in runs[1:]:
        p99 = r["latency_ms"]["p99"]
        if (p99 is None or (base and p99 > knee_factor * base)
                or r["throughput_ratio"] < min_ratio):
            latency_knee = r["target_rps"]
            break
    best = max(runs, key=lambda r: r["throughput_rps"]) if runs else None
    return {
        "slo_knee_rps": slo_knee,
        "latency_knee_rps": latency_knee,
        "max_throughput_rps": best["throughput_rps"] if best else None,
        "baseline_p99_ms": base,
        "knee_factor": knee_factor,
    }
