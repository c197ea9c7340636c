"""Profile the HTTP path under load with py-spy: where the ingress replica and the proxy spend
their CPU. Not a benchmark (no baseline): the evidence behind docs/PERFORMANCE.md.

    python -m benchmarks.profile_http --json out.json [--seconds 15] [--concurrency 16]
        [--hit] [--svg-dir DIR] [--ray-env KEY=VALUE ...]

Starts the same ``timeshare`` app as ``benchmarks.http_throughput`` (test environment, under
the same ``make serve`` settings from ``deploy.ray_env``), drives
``POST /v2/models/digits-small/infer`` closed loop from a separate client process and records
the ingress replica and the Serve proxy with ``py-spy record`` (``--idle`` off: CPU samples only,
so the shares are of CPU time). Prints, per process, the share of samples whose stack passes
through each of a fixed list of request-path markers (inclusive) and the top leaf functions.
Needs ``pip install py-spy`` and ptrace rights (root, or ``kernel.yama.ptrace_scope=0``).

``--threads`` records no stacks: it reads each thread's CPU time from ``/proc`` over the same
window and reports the busiest threads of each process as shares of one core. py-spy counts a
thread that is runnable but waiting for a core as busy; this is the kernel's own account, and
nothing is attached to the processes.
"""

from __future__ import annotations

import argparse
import collections
import logging
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._http_client import LoadSpec, run_load
from benchmarks._output import emit, stdout_to_stderr
from benchmarks._proc_cpu import pids_matching, thread_cpu_s, thread_shares
from benchmarks._serve_net import free_port
from benchmarks.http_throughput import _body, _ray_env, _repository

# Substrings of "function (file)" frames that mark a stage of the request path.
MARKERS = {
    "v2 decode / encode": ("router/v2.py",),
    "http handler (router/http.py)": ("router/http.py",),
    "pipeline (router/pipeline.py)": ("router/pipeline.py",),
    "validation": ("validate_inputs",),
    "cache": ("router/cache/",),
    "chain runner": ("fallbacks/chain.py",),
    "breakers": ("fallbacks/breaker.py",),
    "recorders": ("router/_private/recorders.py",),
    "telemetry": ("alerting/telemetry.py", "opentelemetry"),
    "call log": ("router/calllog.py",),
    "pool host / service": ("pool/host.py", "pool/service.py"),
    "device worker loop": ("pool/_private/worker.py", "pool/_private/queue.py"),
    "scheduling policy": ("policies/scheduling.py",),
    "chunk runner / forward": ("pool/_private/chunk.py",),
    "torch forward": ("torch/jit", "torch/nn/modules", ".forward ("),  # not "_forward ("
    "pydantic": ("pydantic",),
    "json": ("json/", "orjson"),
    "starlette / fastapi": ("starlette", "fastapi"),
    "uvicorn / h11 / httptools": ("uvicorn", "h11", "httptools"),
    "ray serve replica": ("ray/serve/_private/replica.py",),
    "ray serve proxy": ("ray/serve/_private/proxy",),
    "ray serve router / handle": ("ray/serve/_private/router.py", "ray/serve/handle.py",
                                  "request_router"),
    "ray core rpc / serialization": ("ray/_private/serialization", "ray/_raylet", "grpc",
                                     "cloudpickle"),
    "asyncio event loop": ("asyncio/", "uvloop"),
    "logging": ("logging/",),
}


def _record(pid: int, seconds: float, out: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "py-spy"), "record", "-p", str(pid), "-d",
         str(int(seconds)), "-r", "200", "-f", "raw", "-o", str(out), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def summarize(collapsed: Path, top: int = 15) -> dict[str, Any]:
    """Shares of samples per marker (inclusive) and the top leaf frames. A line that is not
    ``stack count`` is counted and skipped: ``--nonblocking`` sampling reads the target's
    memory while it runs, and a torn read can name a frame with a stray string (seen: a
    docstring spread over several lines)."""
    total = skipped = 0
    marks: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            skipped += 1
            continue
        n = int(count)
        total += n
        for name, subs in MARKERS.items():
            if any(s in stack for s in subs):
                marks[name] += n
        leaves[stack.rsplit(";", 1)[-1]] += n
    pct = (lambda n: round(100.0 * n / total, 1)) if total else (lambda n: 0.0)
    return {"samples": total, "unparsed_lines": skipped,
            "inclusive_pct": {k: pct(v) for k, v in marks.most_common()},
            "top_leaves_pct": {k: pct(v) for k, v in leaves.most_common(top)}}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ray import serve

    from router.app import build_app

    tmp = Path(tempfile.mkdtemp(prefix="timeshare-profile-"))
    repo, _, cfg = _repository(tmp, args.model)
    in_name, shape = cfg["inputs"][0]["name"], [int(d) for d in cfg["inputs"][0]["shape"]]
    x = np.random.default_rng(0).standard_normal([1, *shape]).astype(np.float32)
    for kv in _ray_env(args):
        k, _, v = kv.partition("=")
        os.environ[k] = v
    client = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"))
    port = free_port()
    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app_args: dict[str, Any] = {"repository": str(repo), "environment": "test"}
        if args.listener:  # Timeshare's own listener (router.listener) instead of Serve's port
            app_args["listener"] = {"port": (port := free_port())}
        serve.run(build_app(app_args), name="timeshare", route_prefix="/")
        spec = LoadSpec("127.0.0.1", port, f"/v2/models/{args.model}/infer",
                        _body(in_name, x, bypass=not args.hit), duration_s=3.0,
                        concurrency=args.concurrency, warmup_s=1.0)
        warm = client.submit(run_load, spec).result()
        procs = {"ingress": pids_matching("ServeReplica:timeshare:Ingress"),
                 "proxy": pids_matching("ProxyActor")}
        spec = LoadSpec(spec.host, spec.port, spec.path, spec.body,
                        duration_s=args.seconds + 4, concurrency=args.concurrency, warmup_s=1.0)
        fut = client.submit(run_load, spec)
        time.sleep(2.0)
        outs = {name: tmp / f"{name}.txt" for name, p in procs.items() if p}
        threads: dict[str, Any] = {}
        if args.threads:
            before = {name: thread_cpu_s(p[0]) for name, p in procs.items() if p}
            t0 = time.monotonic()
            time.sleep(args.seconds)
            wall = time.monotonic() - t0
            threads = {name: thread_shares(before[name], thread_cpu_s(procs[name][0]), wall)
                       for name in before}
            outs = {}
        recs = {name: _record(procs[name][0], args.seconds, out) for name, out in outs.items()}
        for rec in recs.values():
            rec.wait()
        load = fut.result()
        if args.svg_dir:
            Path(args.svg_dir).mkdir(parents=True, exist_ok=True)
            for name, out in outs.items():
                shutil.copy(out, Path(args.svg_dir) / f"{name}.collapsed.txt")
        profiles = {name: summarize(out) for name, out in outs.items() if out.exists()}
    finally:
        client.shutdown()
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    lat = np.asarray(load["latencies_s"]) * 1e3
    return {"benchmark": "profile_http", "model": args.model, "cache_hit": args.hit,
            "concurrency": args.concurrency, "seconds": args.seconds,
            "ray_env": _ray_env(args), "listener": args.listener,
            "warm_n": len(warm["latencies_s"]),
            "load": {"n": int(lat.size), "rps": round(lat.size / spec.duration_s, 1),
                     "p50_ms": round(float(np.percentile(lat, 50)), 3) if lat.size else None},
            "profiles": profiles, "threads": threads}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json")
    p.add_argument("--model", default="digits-small")
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--hit", action="store_true", help="cache hits instead of cache bypass")
    p.add_argument("--listener", action="store_true",
                   help="drive Timeshare's own listener port instead of Serve's")
    p.add_argument("--threads", action="store_true",
                   help="per-thread CPU shares from /proc instead of py-spy stacks")
    p.add_argument("--svg-dir", help="keep the collapsed stacks here (for flamegraph tools)")
    p.add_argument("--ray-env", action="append", default=[], metavar="KEY=VALUE",
                   help="on top of deploy.ray_env's settings (make serve's), as http_throughput")
    args = p.parse_args(argv)
    with stdout_to_stderr():
        result = run(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
