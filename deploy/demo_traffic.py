"""``timeshare demo traffic``: a bounded Zipf mix over the demo zoo, realtime and batch callers.

Realtime callers send one-row requests open-loop (Poisson arrivals at ``--rate``), priority
``realtime``, short deadline; a share of them (``--repeat``) reuse a few fixed rows per model so
they hit the result cache, the rest are fresh rows that reach the device. Batch callers send
``--batch-rows``-row requests closed-loop, priority ``batch``, fresh rows (cache misses).
Models are picked with Zipf(``--zipf``) popularity, so a few are hot and the
long tail has to be swapped in: with the test overlay's device budget (about a third of the
zoo) the status shows swaps, host-tier models, queues per priority and preemptions moving.

Loopback only (it is a demo load, not a load test: see ``timeshare loadtest``), and bounded in
time (``--duration``, at most 600 s) and in flight (64 realtime requests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx
import numpy as np

__all__ = ["main", "run_traffic", "zipf_weights"]

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_DURATION_S = 600.0


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    input_name: str
    features: int
    rows: np.ndarray  # fixed realtime rows (repeats hit the cache)


@dataclass(slots=True)
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)

    def add(self, kind: str, outcome: str, ms: float) -> None:
        self.outcomes[f"{kind} {outcome}"] += 1
        self.latency_ms.setdefault(kind, []).append(ms)


def zipf_weights(n: int, s: float) -> list[float]:
    """Zipf(s) popularity of ranks 1..n, normalised."""
    w = [1.0 / (k ** s) for k in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def _check_loopback(url: str) -> None:
    host = urlparse(url).hostname or ""
    if host not in LOOPBACK:
        raise SystemExit(f"--url: demo traffic goes to loopback only (127.0.0.1, localhost, ::1), "
                         f"got {host!r}; use `timeshare loadtest` for other targets")


async def _targets(client: httpx.AsyncClient, models: list[str] | None, rng: np.random.Generator
                   ) -> list[Target]:
    if not models:
        r = await client.get("/v2/status")
        r.raise_for_status()
        names: set[str] = set()
        for info in r.json().get("pools", {}).values():
            names.update(m for m, e in info.get("models", {}).items() if e.get("default_version"))
        models = sorted(names)
    out = []
    for name in models:
        meta = (await client.get(f"/v2/models/{name}")).json()
        inp = meta["inputs"][0]
        n = int(inp["shape"][-1])
        out.append(Target(name, inp["name"], n, rng.normal(size=(16, n)).astype(np.float32)))
    if not out:
        raise SystemExit("no ready models to send traffic to")
    return out


def _body(t: Target, x: np.ndarray, priority: str, deadline_ms: float) -> dict:
    return {"inputs": [{"name": t.input_name, "shape": list(x.shape), "datatype": "FP32",
                        "data": x.reshape(-1).tolist()}],
            "parameters": {"priority": priority, "deadline_ms": deadline_ms,
                           "caller": f"demo-{priority}"}}


async def _send(client: httpx.AsyncClient, t: Target, x: np.ndarray, kind: str,
                deadline_ms: float, tally: Tally) -> None:
    start = time.perf_counter()
    try:
        r = await client.post(f"/v2/models/{t.name}/infer",
                              json=_body(t, x, kind, deadline_ms), timeout=deadline_ms / 1e3 + 5)
        p = r.json().get("parameters", {}) if r.status_code == 200 else {}
        outcome = (f"http {r.status_code}" if r.status_code != 200 else
                   "degraded" if p.get("degraded") else
                   "cache hit" if p.get("cache") in ("memory", "redis", "semantic") else "ok")
    except httpx.HTTPError as e:
        outcome = type(e).__name__
    tally.add(kind, outcome, (time.perf_counter() - start) * 1e3)


async def run_traffic(url: str, *, duration_s: float, rate: float, batch_callers: int,
                      batch_rows: int, zipf_s: float, seed: int = 0,
                      models: list[str] | None = None, api_key: str | None = None,
                      repeat: float = 0.5, max_inflight: int = 64) -> Tally:
    """Send the mix for ``duration_s`` seconds; returns the outcome counts and latencies."""
    _check_loopback(url)
    if not 0 < duration_s <= MAX_DURATION_S:
        raise SystemExit(f"--duration: must be in (0, {MAX_DURATION_S:g}] seconds")
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    headers = {"X-API-Key": api_key} if api_key else None
    tally = Tally()
    limits = httpx.Limits(max_connections=max_inflight + batch_callers)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=30) as client:
        targets = await _targets(client, models, rng)
        pick.shuffle(targets)  # which models are hot: seeded, not alphabetical
        weights = zipf_weights(len(targets), zipf_s)
        end = time.monotonic() + duration_s
        inflight: set[asyncio.Task] = set()

        async def batch_caller() -> None:
            while time.monotonic() < end:
                t = pick.choices(targets, weights)[0]
                x = rng.normal(size=(batch_rows, t.features)).astype(np.float32)
                await _send(client, t, x, "batch", 10_000, tally)

        batchers = [asyncio.create_task(batch_caller()) for _ in range(batch_callers)]
        while time.monotonic() < end:
            await asyncio.sleep(pick.expovariate(rate))
            if len(inflight) >= max_inflight:
                tally.outcomes["realtime skipped (max in flight)"] += 1
                continue
            t = pick.choices(targets, weights)[0]
            x = (t.rows[pick.randrange(len(t.rows))][None, :] if pick.random() < repeat
                 else rng.normal(size=(1, t.features)).astype(np.float32))
            task = asyncio.create_task(_send(client, t, x, "realtime", 500, tally))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        await asyncio.gather(*batchers, *inflight)
    return tally


def _report(tally: Tally, duration_s: float) -> str:
    lines = [f"{k:40s} {v:7d}" for k, v in sorted(tally.outcomes.items())]
    for kind, ms in sorted(tally.latency_ms.items()):
        q = np.percentile(ms, [50, 99])
        lines.append(f"{kind:10s} {len(ms) / duration_s:7.1f} req/s  p50 {q[0]:7.1f} ms  "
                     f"p99 {q[1]:7.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="timeshare demo traffic", description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="the app (loopback only)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds (at most 600)")
    ap.add_argument("--rate", type=float, default=40.0, help="realtime requests per second")
    ap.add_argument("--batch-callers", type=int, default=2, help="closed-loop batch callers")
    ap.add_argument("--batch-rows", type=int, default=64,
                    help="rows per batch request (at most the models' max_batch_size)")
    ap.add_argument("--zipf", type=float, default=1.1, help="Zipf exponent of model popularity")
    ap.add_argument("--repeat", type=float, default=0.5,
                    help="share of realtime requests that repeat a row (cache hits)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", nargs="*", help="only these models (default: every ready one)")
    ap.add_argument("--api-key", default=os.environ.get("TIMESHARE_API_KEY"),
                    help="operator key for /v2/status (default: $TIMESHARE_API_KEY)")
    args = ap.parse_args(argv)
    _check_loopback(args.url)
    print(f"demo traffic to {args.url} for {args.duration:g} s: {args.rate:g} realtime req/s, "
          f"{args.batch_callers} batch callers x {args.batch_rows} rows; watch it with "
          f"`timeshare status --watch` or {args.url}/ui", flush=True)
    try:
        tally = asyncio.run(run_traffic(
            args.url, duration_s=args.duration, rate=args.rate, batch_callers=args.batch_callers,
            batch_rows=args.batch_rows, zipf_s=args.zipf, seed=args.seed, models=args.models,
            api_key=args.api_key, repeat=args.repeat))
    except httpx.HTTPError as e:
        print(f"cannot reach {args.url}: {e}", file=sys.stderr)
        return 2
    print(_report(tally, args.duration))
    return 0
