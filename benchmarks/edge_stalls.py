"""Host stalls at moderate load: does the edge turn a short pause into shed requests?

    python -m benchmarks.edge_stalls --json out.json [--rate 800] [--stall-ms 40] [--pairs 2]

The real ingress (``benchmarks._overload_server``: plain uvicorn, no Ray) serves ``digits-small``
with the cache bypassed, under an open loop of ``--rate`` req/s (``benchmarks._http_client``,
its own process) for ``--seconds``. Once a second the server process is stopped for
``--stall-ms`` (``SIGSTOP`` / ``SIGCONT``): a pause of the host, as a busy shared machine gives
one. Requests pile up at the edge meanwhile and are let through when it resumes. Two arms,
alternated ``--pairs`` times: ``edge.admission.burst_factor`` 1 (a class's in-flight share binds
at once, the behaviour before the standing-backlog rule) and the default (a burst on a backlog
that was short may reach ``burst_factor`` times the share, see ``policies.edge``).

Reported per run: model answers, requests shed (503s plus answers labelled degraded: a shed
request's fallback), p50 and p99. ``meets_targets``: in every pair the default sheds at most half
as many requests as the bare share, with a p99 at most 10 % higher. Linux only (signals).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks._output import emit

PATH = "/v2/models/digits-small/infer"


def _load(port: int, body: bytes, rate: float, seconds: float, q: Any) -> None:
    from benchmarks._http_client import LoadSpec, run_load

    q.put(run_load(LoadSpec("127.0.0.1", port, PATH, body, duration_s=seconds, rate=rate,
                            warmup_s=0.5)))


def _start(repo: Path, burst: float | None) -> tuple[subprocess.Popen, int]:
    from benchmarks._serve_net import free_port

    port = free_port()
    edge = {"admission": {"burst_factor": burst}} if burst is not None else {}
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks._overload_server", "--repo",
                             str(repo), "--port", str(port), "--edge", "on", "--deadline-ms",
                             "1000", "--edge-json", json.dumps(edge)], stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v2/models/digits-small/ready"
    stop = time.monotonic() + 120
    while time.monotonic() < stop:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the ingress did not get ready in 120 s")


def _run(repo: Path, body: bytes, burst: float | None, args: argparse.Namespace) -> dict:
    proc, port = _start(repo, burst)
    try:
        for _ in range(300):  # warm: first forward passes, the inline qualification
            httpx.post(f"http://127.0.0.1:{port}{PATH}", content=body, timeout=10)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        client = ctx.Process(target=_load, args=(port, body, args.rate, args.seconds, q))
        client.start()
        time.sleep(1.5)  # the client's start and warm-up
        stalls = 0
        end = time.monotonic() + args.seconds - 1.5
        while time.monotonic() < end:
            os.kill(proc.pid, signal.SIGSTOP)
            time.sleep(args.stall_ms / 1e3)
            os.kill(proc.pid, signal.SIGCONT)
            stalls += 1
            time.sleep(1.0)
        r = q.get()
        client.join()
    finally:
        proc.terminate()
        proc.wait()
    lat = sorted(r["latencies_s"])
    return {"burst_factor": burst if burst is not None else "default", "stalls": stalls,
            "answers": len(lat), "shed_503": r["n_errors"],
            "shed_fallback": r["n_degraded"], "shed": r["n_errors"] + r["n_degraded"],
            "p50_ms": round(1e3 * lat[len(lat) // 2], 2) if lat else None,
            "p99_ms": round(1e3 * lat[int(0.99 * len(lat))], 2) if lat else None,
            "error_samples": r["errors"][:3]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json")
    p.add_argument("--rate", type=float, default=800.0)
    p.add_argument("--stall-ms", type=float, default=40.0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--pairs", type=int, default=2)
    args = p.parse_args(argv)
    from benchmarks.http_throughput import _body, _repository

    root = Path(tempfile.mkdtemp(prefix="ts-stalls-"))
    repo, _, _ = _repository(root, "digits-small")
    x = np.random.default_rng(0).standard_normal([1, 64]).astype(np.float32)
    body = _body("pixels", x, bypass=True)
    pairs: list[dict[str, Any]] = [
        {"bare_share": _run(repo, body, 1.0, args), "default": _run(repo, body, None, args)}
        for _ in range(args.pairs)]
    for pair in pairs:
        bare, new = pair["bare_share"], pair["default"]
        pair["shed_ratio"] = round(new["shed"] / bare["shed"], 3) if bare["shed"] else None
        pair["p99_ratio"] = (round(new["p99_ms"] / bare["p99_ms"], 3)
                             if bare["p99_ms"] and new["p99_ms"] else None)
    meets = all(pr["shed_ratio"] is not None and pr["shed_ratio"] <= 0.5
                and pr["p99_ratio"] is not None and pr["p99_ratio"] <= 1.1 for pr in pairs)
    emit({"benchmark": "edge_stalls", "model": "digits-small", "rate_rps": args.rate,
          "stall_ms": args.stall_ms, "seconds": args.seconds,
          "server": "benchmarks._overload_server (uvicorn, no Ray), cache bypassed",
          "pairs": pairs, "meets_targets": meets}, args.json)


if __name__ == "__main__":
    main()
