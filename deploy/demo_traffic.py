"""``timeshare demo traffic``: a bounded Zipf mix over the demo zoo, realtime and batch callers.

Realtime callers send one-row requests open-loop (Poisson arrivals at ``--rate``), priority
``realtime``, short deadline; a share of them (``--repeat``) reuse a few fixed rows per model so
they hit the result cache, the rest are fresh rows that reach the device. Batch callers send
``--batch-rows``-row requests closed-loop, priority ``batch``, fresh rows (cache misses).
Models are picked with Zipf(``--zipf``) popularity, so a few are hot and the
long tail has to be swapped in: with the test overlay's device budget (about a third of the
zoo) the status shows swaps, host-tier models, queues per priority and preemptions moving.

It goes through Timeshare's own listener (port 8100) by default, and the batch callers are
enough (``--batch-callers 8``) to keep the device busy, so the classes share a device that has a
queue: that is where priorities act. The batch callers run in a process of their own (as a batch
job would), so their client-side work never delays a realtime send; both send tensors in the
binary tensor extension, as ``tritonclient.http`` does. At the end it prints, per class, the
client's p50 / p99 (cache hits apart: they never queue) with the pool's queue wait and compute
for the same answers (each answer's ``queue_ms`` / ``compute_ms``), then the app's own view from
``/v2/status`` (end to end at the ingress; queue wait against compute on each device; shed and
refused counts) over its last 30 to 36 s.

Loopback only (it is a demo load, not a load test: see ``timeshare loadtest``), and bounded in
time (``--duration``, at most 600 s) and in flight (64 realtime requests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx
import numpy as np

__all__ = ["main", "report", "run_traffic", "server_report", "zipf_weights"]

PRIORITIES = ("realtime", "interactive", "batch", "background")
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
    """Outcomes, and per class the client-side latency of the answers the device computed
    (``kind``) and of the cache hits (``kind cache hit``, apart: they never queue), with the
    pool's own queue wait and compute for each answer (its ``queue_ms``, ``compute_ms``)."""

    outcomes: Counter[str] = field(default_factory=Counter)
    latency_ms: dict[str, list[float]] = field(default_factory=dict)
    queue_ms: dict[str, list[float]] = field(default_factory=dict)
    compute_ms: dict[str, list[float]] = field(default_factory=dict)

    def merge(self, other: Tally) -> None:
        """Add ``other``'s counts and samples (another process's callers)."""
        self.outcomes.update(other.outcomes)
        for mine, theirs in ((self.latency_ms, other.latency_ms), (self.queue_ms, other.queue_ms),
                             (self.compute_ms, other.compute_ms)):
            for k, v in theirs.items():
                mine.setdefault(k, []).extend(v)

    def add(self, kind: str, outcome: str, ms: float, params: dict | None = None) -> None:
        self.outcomes[f"{kind} {outcome}"] += 1
        key = f"{kind} cache hit" if outcome == "cache hit" else kind
        self.latency_ms.setdefault(key, []).append(ms)
        if outcome == "ok" and params:
            self.queue_ms.setdefault(kind, []).append(float(params.get("queue_ms", 0.0)))
            self.compute_ms.setdefault(kind, []).append(float(params.get("compute_ms", 0.0)))


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


def _body(t: Target, x: np.ndarray, priority: str, deadline_ms: float
          ) -> tuple[bytes, dict[str, str]]:
    """The request in the binary tensor extension (what ``tritonclient.http`` sends): a JSON
    header, then the raw FP32 rows; no JSON list of floats to build or parse."""
    blob = np.ascontiguousarray(x, dtype=np.float32).tobytes()
    head = json.dumps({
        "inputs": [{"name": t.input_name, "shape": list(x.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": len(blob)}}],
        "parameters": {"priority": priority, "deadline_ms": deadline_ms,
                       "caller": f"demo-{priority}"}}).encode()
    return head + blob, {"Inference-Header-Content-Length": str(len(head)),
                         "Content-Type": "application/octet-stream"}


async def _send(client: httpx.AsyncClient, t: Target, x: np.ndarray, kind: str,
                deadline_ms: float, tally: Tally) -> None:
    start = time.perf_counter()
    try:
        body, headers = _body(t, x, kind, deadline_ms)
        r = await client.post(f"/v2/models/{t.name}/infer", content=body, headers=headers,
                              timeout=deadline_ms / 1e3 + 5)
        p = r.json().get("parameters", {}) if r.status_code == 200 else {}
        outcome = (f"http {r.status_code}" if r.status_code != 200 else
                   "degraded" if p.get("degraded") else
                   "cache hit" if p.get("cache") in ("memory", "redis", "semantic") else "ok")
    except httpx.HTTPError as e:
        outcome, p = type(e).__name__, {}
    tally.add(kind, outcome, (time.perf_counter() - start) * 1e3, p)


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
    limits = httpx.Limits(max_connections=max_inflight)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=30) as client:
        targets = await _targets(client, models, rng)
        pick.shuffle(targets)  # which models are hot: seeded, not alphabetical
        weights = zipf_weights(len(targets), zipf_s)
        end = time.monotonic() + duration_s
        inflight: set[asyncio.Task] = set()

        # The batch callers are another client (another process, as a batch job would be): in
        # this one, their work would delay the realtime sends and count in realtime latency.
        batchers = asyncio.get_running_loop().run_in_executor(
            None, _batch_process, url, api_key, targets, weights, time.time() + duration_s,
            batch_callers, batch_rows, seed + 1)
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
        await asyncio.gather(*inflight)
        tally.merge(await batchers)
    return tally


def _batch_process(url: str, api_key: str | None, targets: list[Target], weights: list[float],
                   end_wall_s: float, callers: int, rows: int, seed: int) -> Tally:
    """Run ``callers`` closed-loop batch callers in a child process until ``end_wall_s``."""
    if callers <= 0:
        return Tally()
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked event loop
    with ProcessPoolExecutor(1, mp_context=ctx) as ex:
        return ex.submit(_batch_main, url, api_key, targets, weights, end_wall_s, callers, rows,
                         seed).result()


def _batch_main(url: str, api_key: str | None, targets: list[Target], weights: list[float],
                end_wall_s: float, callers: int, rows: int, seed: int) -> Tally:
    return asyncio.run(_batch_callers(url, api_key, targets, weights, end_wall_s, callers, rows,
                                      seed))


async def _batch_callers(url: str, api_key: str | None, targets: list[Target],
                         weights: list[float], end_wall_s: float, callers: int, rows: int,
                         seed: int) -> Tally:
    rng, pick, tally = np.random.default_rng(seed), random.Random(seed), Tally()
    headers = {"X-API-Key": api_key} if api_key else None
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30,
                                 limits=httpx.Limits(max_connections=callers)) as client:

        async def caller() -> None:
            while time.time() < end_wall_s:
                t = pick.choices(targets, weights)[0]
                x = rng.normal(size=(rows, t.features)).astype(np.float32)
                await _send(client, t, x, "batch", 10_000, tally)

        await asyncio.gather(*(caller() for _ in range(callers)))
    return tally


def _pq(ms: list[float] | None) -> str:
    if not ms:
        return f"{'–':>17s}"
    q = np.percentile(ms, [50, 99])
    return f"{q[0]:7.1f} / {q[1]:7.1f}"


def report(tally: Tally, duration_s: float) -> str:
    """The outcome counts, then per class the client's p50 / p99 and the pool's queue wait and
    compute (p50 / p99, ms) of the answers the device computed."""
    lines = [f"{k:40s} {v:7d}" for k, v in sorted(tally.outcomes.items())]
    lines.append(f"\nclient side, whole run   {'req/s':>7s}  {'p50 / p99 ms':>17s}   "
                 f"{'pool queue wait':>17s}   {'pool compute':>17s}")
    order = {k: i for i, k in enumerate(PRIORITIES)}
    for key in sorted(tally.latency_ms, key=lambda k: (order.get(k.split()[0], 9), k)):
        ms = tally.latency_ms[key]
        lines.append(f"{key:24s} {len(ms) / duration_s:7.1f}  {_pq(ms)}   "
                     f"{_pq(tally.queue_ms.get(key))}   {_pq(tally.compute_ms.get(key))}")
    return "\n".join(lines)


def server_report(status: dict) -> str:
    """The app's own per-class view (``/v2/status``): end to end at the ingress, and on each
    device the queue wait against the compute, over the status window."""
    classes = status.get("classes") or {}
    if not classes:
        return "server: no per-class view in /v2/status (an older app)"
    lines = [f"server side, last {classes.get('window_s', 0):.0f} s (/v2/status): "
             f"{'req/s':>7s}  {'p50 / p99 ms':>17s}   {'queue wait':>17s}   "
             f"{'compute':>17s}   shed  refused"]
    devices = {pool: info.get("device", {}).get("classes", {}).get("by_class", {})
               for pool, info in status.get("pools", {}).items() if "error" not in info}
    for label in PRIORITIES:
        row = classes.get("by_class", {}).get(label, {})
        if not row.get("requests") and not row.get("shed") and not row.get("refused"):
            continue
        for pool, by in devices.items():
            dev = by.get(label, {})
            lines.append(
                f"{label + ' @ ' + pool:37s} {row.get('rate_per_s', 0):7.1f}  "
                f"{_ms(row.get('latency_ms'))}   {_ms(dev.get('queue_ms'))}   "
                f"{_ms(dev.get('compute_ms'))}   {row.get('shed', 0):4d}  "
                f"{row.get('refused', 0):7d}")
    return "\n".join(lines)


def _ms(s: dict | None) -> str:
    if not s or s.get("p50") is None:
        return f"{'–':>17s}"
    return f"{s['p50']:7.1f} / {s['p99']:7.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="timeshare demo traffic", description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8100",
                    help="the app (loopback only; default: Timeshare's own listener)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds (at most 600)")
    ap.add_argument("--rate", type=float, default=40.0, help="realtime requests per second")
    ap.add_argument("--batch-callers", type=int, default=8,
                    help="closed-loop batch callers (enough to keep the device busy)")
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
    print(report(tally, args.duration))
    try:
        headers = {"X-API-Key": args.api_key} if args.api_key else None
        r = httpx.get(f"{args.url}/v2/status", headers=headers, timeout=10)
        r.raise_for_status()
        print(server_report(r.json()))
    except httpx.HTTPError as e:
        print(f"server side: cannot read {args.url}/v2/status: {e}", file=sys.stderr)
    return 0
