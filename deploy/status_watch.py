"""``timeshare status --watch``: a live terminal view of ``/v2/status`` (rich), about every second.

Per device: its busy share, batches/s and mean forward time, memory, resident models by bytes,
the host tier, queue depth per priority, swaps/s, preemptions/s. Per priority class (the last 30
to 36 s): request rate, p50 and p99 latency end to end at the ingress, each device's queue wait
against its compute (p50 / p99), and how many requests were shed or refused. Per model: request
rate, p99, cache-hit and degraded shares, breaker state. Then every refused or failed model
config or version with its reason, file and field, and the firing alerts. Device rates are the
change of the replica's cumulative counters between two polls.
When stdout is not a terminal it prints one snapshot and exits (``--frames`` to take more);
``--record FILE`` also writes every frame as plain text (how docs/ops/status-watch.txt was made).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from deploy.load_problems import load_problems

__all__ = ["DeviceRates", "Rates", "main", "render"]

PRIORITIES = ("realtime", "interactive", "batch", "background")
MIB = float(1 << 20)


@dataclass(frozen=True, slots=True)
class DeviceRates:
    """One device between two polls: swaps and preemptions per second, batches per second,
    the device's busy share (its forward passes' device time over the interval: above 1 on a
    GPU whose streams overlapped) and their mean forward time. ``busy``, ``forward_ms`` and
    ``batches_per_s`` are None before the second poll; ``forward_ms`` also when no batch ran."""

    swaps_per_s: float = 0.0
    preemptions_per_s: float = 0.0
    batches_per_s: float | None = None
    busy: float | None = None
    forward_ms: float | None = None


@dataclass(frozen=True, slots=True)
class _Counters:
    at: float
    swaps: int
    preemptions: int
    batches: int
    compute_s: float


@dataclass
class Rates:
    """Per-second rates of each device's cumulative counters between two polls."""

    _last: dict[str, _Counters] = field(default_factory=dict)

    def update(self, device: str, at: float, swaps: int, preemptions: int, *,
               batches: int = 0, compute_s: float = 0.0) -> DeviceRates:
        now = _Counters(at, swaps, preemptions, batches, compute_s)
        prev = self._last.get(device)
        self._last[device] = now
        if prev is None or at <= prev.at:
            return DeviceRates()
        dt = at - prev.at
        ran = max(0, batches - prev.batches)
        busy_s = max(0.0, compute_s - prev.compute_s)
        return DeviceRates(max(0, swaps - prev.swaps) / dt,
                           max(0, preemptions - prev.preemptions) / dt,
                           batches_per_s=ran / dt, busy=busy_s / dt,
                           forward_ms=busy_s / ran * 1e3 if ran else None)


def _fmt(x: Any, spec: str = ".1f", *, pct: bool = False) -> str:
    if x is None:
        return "–"
    return f"{x:.0%}" if pct else format(x, spec)


def _busy_cell(r: DeviceRates) -> str:
    """The device's busy share since the last poll, its batches per second and their mean
    forward time: a device busy near 100 % with forwards longer than when it was quiet shares
    its cores (docs/OVERLOAD.md); one idle while requests are refused is starved."""
    if r.busy is None or r.batches_per_s is None:
        return "–"
    forward = "–" if r.forward_ms is None else f"{r.forward_ms:.1f} ms"
    return f"{r.busy:.0%}  ({r.batches_per_s:.1f} batches/s, forward {forward})"


def _device_panel(pool: str, info: dict, rates: Rates, at: float) -> Panel:
    if "error" in info:
        return Panel(Text(info["error"], style="red"), title=pool)
    d = info.get("device", {})
    mem, swaps = d.get("memory", {}), d.get("swaps", {})
    r = rates.update(f"{pool}:{d.get('device')}", at, swaps.get("count", 0),
                     d.get("preemptions", 0), batches=d.get("chunks", 0),
                     compute_s=d.get("compute_s", 0.0))
    used, total = mem.get("used_bytes", 0), mem.get("total_bytes", 0) or 1
    head = Table.grid(padding=(0, 2))
    head.add_row("memory", f"{used / MIB:.2f} / {total / MIB:.2f} MiB ({used / total:.0%}); "
                 f"host tier {mem.get('host_used_bytes', 0) / MIB:.2f} MiB")
    head.add_row("busy", _busy_cell(r))
    head.add_row("swaps", f"{r.swaps_per_s:.1f}/s  ({swaps.get('count', 0)} total, "
                 f"{swaps.get('bytes', 0) / MIB:.1f} MiB, {swaps.get('ms', 0):.0f} ms)")
    head.add_row("preemptions", f"{r.preemptions_per_s:.1f}/s  ({d.get('preemptions', 0)} "
                 f"total)  evictions {d.get('evictions', 0)}")
    q = d.get("queue_depth", {})
    head.add_row("queues", "  ".join(f"{p} {q.get(p, 0)}" for p in PRIORITIES))
    resident = sorted(d.get("resident_bytes", {}).items(), key=lambda kv: -kv[1])
    head.add_row(f"resident ({len(resident)})",
                 ", ".join(f"{k} {b / 1024:.0f}K" for k, b in resident) or "–")
    host_only = [k for k in d.get("host_tier", []) if k not in dict(resident)]
    head.add_row(f"host tier ({len(host_only)})",
                 ", ".join(host_only[:12]) + (" …" if len(host_only) > 12 else "") or "–")
    return Panel(head, title=f"{pool} · {d.get('device')}", title_align="left")


def _models_table(status: dict) -> Table:
    breakers: dict[str, list[str]] = {}
    for key, state in status.get("breakers", {}).items():
        model, _, pool = key.partition("@")
        breakers.setdefault(model, []).append(f"{pool} {state}")
    names = set(status.get("models", {}))
    for info in status.get("pools", {}).values():
        names.update(info.get("models", {}))
    t = Table("model", "req/s", "p99 ms", "cache hits", "degraded", "breaker",
              title="models", title_justify="left", expand=False)
    stats = status.get("models", {})
    for name in sorted(names, key=lambda n: (-(stats.get(n, {}).get("rate_per_s") or 0), n)):
        s = stats.get(name, {})
        b = ", ".join(breakers.get(name, [])) or "–"
        t.add_row(name, _fmt(s.get("rate_per_s")), _fmt(s.get("p99_ms")),
                  _fmt(s.get("cache_hit_share"), pct=True),
                  _fmt(s.get("degraded_share"), pct=True),
                  Text(b, style="red" if " open" in b else ""))
    return t


def _wait_cell(pools: dict, label: str, series: str) -> str:
    """Each device's p50 / p99 of ``series`` for class ``label`` (its pool named when several)."""
    cells = []
    for pool, info in pools.items():
        row = info.get("device", {}).get("classes", {}).get("by_class", {}).get(label)
        if row is None:
            continue
        q = row.get(f"{series}_ms") or {}
        cells.append((pool, f"{_fmt(q.get('p50'))} / {_fmt(q.get('p99'))}"))
    if len(cells) == 1:
        return cells[0][1]
    return "\n".join(f"{pool} {cell}" for pool, cell in cells) or "–"


def _classes_table(status: dict) -> Table | None:
    classes = status.get("classes")
    if not classes:
        return None  # an app from before the per-class view
    pools = {p: i for p, i in status.get("pools", {}).items() if "error" not in i}
    t = Table("class", "req/s", "p50 ms", "p99 ms", "queue p50 / p99 ms",
              "compute p50 / p99 ms", "shed", "refused", "errors",
              title=f"priority classes (last {classes.get('window_s', 0):.0f} s; latency end to "
                    "end at the ingress, queue wait and compute on the device)",
              title_justify="left", expand=False)
    for label in PRIORITIES:
        row = classes.get("by_class", {}).get(label, {})
        lat = row.get("latency_ms") or {}
        t.add_row(label, _fmt(row.get("rate_per_s")), _fmt(lat.get("p50")), _fmt(lat.get("p99")),
                  _wait_cell(pools, label, "queue"), _wait_cell(pools, label, "compute"),
                  str(row.get("shed", 0)), str(row.get("refused", 0)), str(row.get("errors", 0)))
    return t


def render(status: dict, rates: Rates, *, at: float, source: str) -> Group:
    """One frame of the view from a ``/v2/status`` body."""
    firing = status.get("firing_alerts", [])
    header = Text(f"timeshare · {source} · {time.strftime('%H:%M:%S', time.localtime(at))} · "
                  f"{len(firing)} alert(s) firing", style="bold")
    parts: list[Any] = [header]
    parts += [_device_panel(p, i, rates, at) for p, i in status.get("pools", {}).items()]
    classes = _classes_table(status)
    if classes is not None:
        parts.append(classes)
    parts.append(_models_table(status))
    problems = load_problems(status)
    parts.append(Text("refused or failed: " + ("none" if not problems else ""),
                      style="red" if problems else ""))
    parts += [Text(f"  {p.describe()}", style="red") for p in problems]
    alerts = Text("firing alerts: " + ("none" if not firing else "; ".join(
        f"{a.get('alertname')} {a.get('severity', '')} " + " ".join(
            f"{k}={v}" for k, v in a.items() if k not in ("alertname", "severity"))
        for a in firing)))
    parts.append(alerts)
    return Group(*parts)


def _fetch(client: httpx.Client, url: str) -> dict:
    r = client.get(f"{url}/v2/status")
    if r.status_code != 200:
        raise RuntimeError(f"{url}/v2/status: {r.status_code} {r.text[:200]}")
    return r.json()


def watch(url: str, *, api_key: str | None, interval_s: float, frames: int | None,
          record: Path | None, console: Console) -> int:
    rates = Rates()
    headers = {"X-API-Key": api_key} if api_key else None
    live = console.is_terminal
    if not live and frames is None:
        frames = 1
    shown = 0
    lv = Live(console=console, auto_refresh=False) if live else None
    with httpx.Client(headers=headers, timeout=5) as client, lv or contextlib.nullcontext():
        while frames is None or shown < frames:
            at = time.time()
            try:
                view: Any = render(_fetch(client, url), rates, at=at, source=url)
            except (httpx.HTTPError, RuntimeError) as e:
                view = Text(f"cannot read {url}/v2/status: {e}", style="red")
            if lv is not None:
                lv.update(view, refresh=True)
            else:
                console.print(view)
            if record is not None:
                _record(view, record, console.width)
            shown += 1
            if frames is None or shown < frames:
                time.sleep(max(0.0, interval_s - (time.time() - at)))
    return 0


def _record(view: Any, path: Path, width: int) -> None:
    rec = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    rec.print(view)
    with path.open("a") as f:
        f.write(rec.export_text() + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="timeshare status --watch",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default=os.environ.get("TIMESHARE_API_KEY"))
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    ap.add_argument("--frames", type=int, default=None,
                    help="stop after this many refreshes (default: until Ctrl-C; 1 off a TTY)")
    ap.add_argument("--record", type=Path, default=None, help="append every frame, as text")
    args = ap.parse_args(argv)
    if args.interval <= 0:
        raise SystemExit("--interval: must be > 0")
    try:
        return watch(args.url, api_key=args.api_key, interval_s=args.interval,
                     frames=args.frames, record=args.record, console=Console())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
