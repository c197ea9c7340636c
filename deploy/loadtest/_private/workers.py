"""HTTP load from several generator processes, one event loop each, merged exactly.

Why processes: one Python event loop on a small machine cannot both keep a schedule of
thousands of sends per second and absorb the burst of answers after a server stall. Worker ``w``
of ``W`` (a fresh interpreter, talking over a socket pair) builds the same seeded plan and takes
requests ``w, w+W, w+2W...`` (interleaved planned
send times, so every worker carries the same load shape), pre-encodes their bytes, pre-opens its
share of the connections, reports ready, and starts at a common ``t0``. ``time.perf_counter`` is
``CLOCK_MONOTONIC`` on Linux, one clock for every process of the machine.

Each worker returns its samples (for plots, windows and groups) and its HDR histograms encoded;
the parent adds the histograms bucket by bucket (same layout), so the run's percentiles are
those of all requests, never an average of per-worker percentiles.
"""

from __future__ import annotations

import asyncio
import gc
import math
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from deploy.loadtest._private.engine import OpenLoop, RunProgress, request_realtime, run_fast
from deploy.loadtest._private.http import BodyEncoder, HttpLane, outcome_of, split_url
from deploy.loadtest._private.plan import PlannedRequest, build_plan
from deploy.loadtest._private.runner import Sample, samples_from
from deploy.loadtest._private.stats import RunHistograms
from deploy.loadtest.config import LoadTestConfig

__all__ = ["run_http"]

# Between "every worker is ready" and the first planned send.
_START_LEAD_S = 0.05
_POLL_S = 0.05


@dataclass(frozen=True, slots=True)
class _Job:
    config: dict[str, Any]
    rate: float
    run_index: int
    worker: int
    workers: int
    lanes: int


async def run_http(cfg: LoadTestConfig, rate: float, run_index: int, *, workers: int,
                   progress: RunProgress) -> tuple[list[Sample], RunHistograms]:
    """Run one rate of ``cfg`` against ``cfg.target.url`` from ``workers`` processes; returns
    the samples in plan order and the merged histograms."""
    lanes = math.ceil(cfg.target.max_connections / workers)
    procs: list[subprocess.Popen[bytes]] = []
    pipes: list[Connection] = []
    try:
        for w in range(workers):
            job = _Job(cfg.model_dump(mode="json"), rate, run_index, w, workers, lanes)
            proc, conn = _spawn(job)
            procs.append(proc)
            pipes.append(conn)
        ready = await _gather(pipes, procs, "ready")
        progress.scheduling = ", ".join(sorted({msg[1] for msg in ready}))
        t0 = time.perf_counter() + _START_LEAD_S
        progress.started_at = t0
        for c in pipes:
            c.send(t0)
        done = await _gather(pipes, procs, "done", progress=progress)
    finally:
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for c in pipes:
            c.close()
    return _merge(done, workers)


def _spawn(job: _Job) -> tuple[subprocess.Popen[bytes], Connection]:
    """A fresh interpreter (never a fork of a caller that may run threads and an event loop,
    and no re-import of the caller's main module) talking over a socket pair."""
    mine, theirs = socket.socketpair()
    code = f"from deploy.loadtest._private.workers import child_main; child_main({theirs.fileno()})"
    proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(theirs.fileno(),))
    theirs.close()
    conn = Connection(mine.detach())
    conn.send(job)
    return proc, conn


def _merge(done: list[tuple[Any, ...]], workers: int) -> tuple[list[Sample], RunHistograms]:
    n = sum(len(msg[1]) for msg in done)
    samples: list[Sample | None] = [None] * n
    hists: RunHistograms | None = None
    for w, (_, part, encoded) in enumerate(done):
        samples[w::workers] = part
        h = RunHistograms.decode(encoded)
        if hists is None:
            hists = h
        else:
            hists.add(h)
    assert hists is not None and all(s is not None for s in samples)
    return [s for s in samples if s is not None], hists


async def _gather(pipes: list[Connection], procs: list[subprocess.Popen[bytes]], kind: str, *,
                  progress: RunProgress | None = None) -> list[Any]:
    """Wait for message ``kind`` from every worker, taking progress messages on the way
    (polling keeps this process idle)."""
    got: list[Any] = [None] * len(pipes)
    counts = [[0, 0, 0, 0] for _ in pipes]
    while any(g is None for g in got):
        for w, c in enumerate(pipes):
            while got[w] is None and c.poll():
                msg = c.recv()
                if msg[0] == "error":
                    raise RuntimeError(f"load-test worker {w} failed: {msg[1]}")
                if msg[0] == "progress":
                    counts[w] = msg[1]
                else:
                    got[w] = msg
            if got[w] is None and procs[w].poll() is not None and not c.poll():
                raise RuntimeError(f"load-test worker {w} exited with {procs[w].returncode}")
        if progress is not None:
            progress.sent, progress.done, progress.errors, progress.in_flight = (
                sum(col) for col in zip(*counts, strict=True))
        await asyncio.sleep(_POLL_S)
    return got


# ---- in the worker process -------------------------------------------------------------------

def child_main(fd: int) -> None:
    """Entry point of a worker process: run the job it is sent on ``fd``."""
    conn = Connection(fd)
    try:
        job = conn.recv()
        cfg = LoadTestConfig.model_validate(job.config)
        plan = build_plan(cfg, job.rate, run_index=job.run_index)[job.worker::job.workers]
        host, port, base = split_url(_url(cfg))
        enc = BodyEncoder(host, port, base)
        data = [enc.encode(p.request) for p in plan]
        # Everything built so far lives for the whole run: out of the collector's sight, a
        # full collection during the schedule scans only what the run allocates (a stall in
        # the send loop is charged to the generator as lag).
        gc.collect()
        gc.freeze()
        rec = run_fast(_drive(cfg, job, plan, data, conn))
        samples = samples_from(plan, rec, outcome_of)
        conn.send(("done", samples, RunHistograms.of(samples).encode()))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


async def _drive(cfg: LoadTestConfig, job: _Job, plan: list[PlannedRequest], data: list[bytes],
                 conn: Connection) -> Any:
    host, port, _ = split_url(_url(cfg))
    prog = RunProgress(total=len(plan))
    lanes: list[HttpLane] = []

    def lane(finish: Any) -> HttpLane:
        lanes.append(HttpLane(host, port, finish))
        return lanes[-1]

    engine = OpenLoop([p.offset_s for p in plan], data, lane, job.lanes,
                      timeout_s=cfg.target.timeout_s,
                      max_in_flight=max(job.lanes, cfg.max_in_flight // job.workers),
                      progress=prog)
    # Pre-open every connection; one that fails is retried (and its error reported) by the
    # first request that needs it.
    await asyncio.gather(*(ln.connect() for ln in lanes), return_exceptions=True)
    conn.send(("ready", request_realtime() if cfg.realtime else "normal"))
    t0 = conn.recv()  # blocking is fine: nothing else runs in this process yet
    publisher = asyncio.get_running_loop().create_task(_publish(prog, conn))
    try:
        return await engine.run(t0)
    finally:
        publisher.cancel()
        for ln in lanes:
            ln.close()


def _url(cfg: LoadTestConfig) -> str:
    if cfg.target.url is None:
        raise ValueError("the HTTP generator needs target.url")
    return cfg.target.url


async def _publish(prog: RunProgress, conn: Connection) -> None:
    while True:
        await asyncio.sleep(0.25)
        conn.send(("progress", [prog.sent, prog.done, prog.errors, prog.in_flight]))
