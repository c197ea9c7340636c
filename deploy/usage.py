"""``timeshare usage --since 1d --by caller [--log PATH | --redis URL]``: who used how much.

Reads the call log (``router/calllog.py``) from its JSON-lines file (rotated files included) or
its Redis stream, keeps records newer than ``--since``, and prints per group the requests,
device-seconds and share of device-seconds, with degraded and cache-hit rates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from router.calllog import DEFAULT_STREAM, CallRecord

__all__ = ["UsageRow", "aggregate", "format_table", "main", "parse_since", "read_jsonl",
           "read_redis"]

DEFAULT_LOG = "var/calllog.jsonl"
_GROUP_KEYS = ("caller", "model", "served_by", "priority")
_CACHE_HITS = frozenset({"memory", "redis", "semantic"})
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PAGE = 1000  # Redis XRANGE page size (bounds one reply)


def parse_since(text: str) -> float:
    """``30m``, ``6h``, ``1d``, ``2w``, ``90s`` -> seconds; ``ValueError`` shows the format."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise ValueError(f"--since must look like 30m, 6h, 1d or 2w, got {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_by(text: str) -> tuple[str, ...]:
    """``caller``, ``model`` or ``caller,model`` -> key names; unknown names are an error."""
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in keys if k not in _GROUP_KEYS]
    if not keys or bad:
        raise ValueError(f"--by takes a comma-separated list of {', '.join(_GROUP_KEYS)}, "
                         f"got {text!r}")
    return keys


def read_jsonl(path: str | Path, *, since_ts: float = 0.0,
               on_bad_line: Callable[[str], None] | None = None) -> Iterator[CallRecord]:
    """Records with ``ts >= since_ts`` from ``path`` and its rotated ``path.N`` files.

    Malformed lines (e.g. one cut short by a crash) are skipped and passed to ``on_bad_line``."""
    p = Path(path)
    rotated = [q for q in p.parent.glob(f"{p.name}.*") if q.suffix[1:].isdigit()]
    rotated.sort(key=lambda q: -int(q.suffix[1:]))  # oldest first
    for f in [*rotated, p]:
        if not f.exists():
            continue
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = CallRecord.from_dict(json.loads(line))
                except ValueError as e:  # JSONDecodeError is a ValueError
                    if on_bad_line:
                        on_bad_line(f"{f}:{n}: {e}")
                    continue
                if rec.ts >= since_ts:
                    yield rec


def read_redis(url: str, *, stream: str = DEFAULT_STREAM, since_ts: float = 0.0,
               client: object | None = None) -> Iterator[CallRecord]:
    """Records with ``ts >= since_ts`` from a Redis stream, read in pages of 1000 entries.

    Entry ids are Redis arrival times in ms, so the scan starts at ``since_ts``; each record's
    own ``ts`` is still checked."""
    import redis

    r = client or redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
    start = f"{max(int(since_ts * 1000) - 60_000, 0)}-0"  # a minute of slack for clock skew
    while True:
        page = r.xrange(stream, min=start, max="+", count=_PAGE)  # type: ignore[attr-defined]
        for _entry_id, fields in page:
            rec = CallRecord.from_dict({k.decode(): v.decode() for k, v in fields.items()})
            if rec.ts >= since_ts:
                yield rec
        if len(page) < _PAGE:
            return
        start = "(" + page[-1][0].decode()


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Totals of one group."""

    key: tuple[str, ...]
    requests: int
    device_s: float
    share: float          # of all device-seconds in the period
    degraded: float       # share of this group's requests
    cache_hits: float     # share of this group's requests answered from a cache


def aggregate(records: Iterable[CallRecord], by: tuple[str, ...]) -> list[UsageRow]:
    """Group records by the ``by`` fields; rows sorted by device-seconds, most first."""
    acc: dict[tuple[str, ...], list[float]] = {}
    for r in records:
        k = tuple(str(getattr(r, f)) for f in by)
        a = acc.setdefault(k, [0, 0.0, 0, 0])
        a[0] += 1
        a[1] += r.device_ms / 1000.0
        a[2] += r.degraded
        a[3] += r.cache in _CACHE_HITS
    total = sum(a[1] for a in acc.values())
    rows = [UsageRow(key=k, requests=int(a[0]), device_s=a[1],
                     share=a[1] / total if total > 0 else 0.0,
                     degraded=a[2] / a[0], cache_hits=a[3] / a[0]) for k, a in acc.items()]
    return sorted(rows, key=lambda r: (-r.device_s, -r.requests, r.key))


def format_table(rows: list[UsageRow], by: tuple[str, ...]) -> str:
    """Fixed-width text table with a total line."""
    head = [*by, "requests", "device_s", "share", "degraded", "cache_hits"]
    body = [[*r.key, str(r.requests), f"{r.device_s:.3f}", f"{r.share:.1%}",
             f"{r.degraded:.1%}", f"{r.cache_hits:.1%}"] for r in rows]
    n = sum(r.requests for r in rows)
    total_s = sum(r.device_s for r in rows)
    body.append(["TOTAL", *[""] * (len(by) - 1), str(n), f"{total_s:.3f}",
                 "100.0%" if rows else "–", "", ""])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=False)]
    numeric = len(by)

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < numeric else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=False))).rstrip()

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="timeshare usage",
                                description="Requests and device-seconds per caller/model.")
    p.add_argument("--since", default="1d", help="period: 30m, 6h, 1d, 2w (default 1d)")
    p.add_argument("--by", default="caller",
                   help=f"group by one or more of {', '.join(_GROUP_KEYS)}, e.g. caller,model")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--log", default=None, help=f"JSON-lines call log (default {DEFAULT_LOG})")
    src.add_argument("--redis", default=None, help="Redis URL of the call-log stream")
    p.add_argument("--stream", default=DEFAULT_STREAM, help="Redis stream key")
    p.add_argument("--json", action="store_true", help="print rows as JSON instead of a table")
    return p


def main(argv: list[str] | None = None, *, clock: Callable[[], float] = time.time) -> int:
    """Entry point; returns the exit status (2 for bad arguments or an unreadable source)."""
    args = _parser().parse_args(argv)
    try:
        since_ts = clock() - parse_since(args.since)
        by = parse_by(args.by)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad: list[str] = []
    try:
        if args.redis:
            records = list(read_redis(args.redis, stream=args.stream, since_ts=since_ts))
        else:
            path = Path(args.log or DEFAULT_LOG)
            if not path.exists():
                print(f"error: call log {path} does not exist", file=sys.stderr)
                return 2
            records = list(read_jsonl(path, since_ts=since_ts, on_bad_line=bad.append))
    except Exception as e:  # noqa: BLE001 - e.g. Redis unreachable: say so plainly
        print(f"error: cannot read the call log: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    for b in bad[:5]:
        print(f"warning: skipped malformed line {b}", file=sys.stderr)
    if len(bad) > 5:
        print(f"warning: ... and {len(bad) - 5} more malformed lines", file=sys.stderr)
    rows = aggregate(records, by)
    if args.json:
        print(json.dumps([{**dict(zip(by, r.key, strict=True)), "requests": r.requests,
                           "device_s": r.device_s, "share": r.share, "degraded": r.degraded,
                           "cache_hits": r.cache_hits} for r in rows], indent=2))
    else:
        print(f"usage since {args.since} ago, by {','.join(by)}: {len(records)} requests")
        print(format_table(rows, by))
    return 0


if __name__ == "__main__":
    sys.exit(main())
