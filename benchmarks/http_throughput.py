"""HTTP and handle throughput: Timeshare against the strongest stock Ray Serve deployment.

    python -m benchmarks.http_throughput --json out.json [--model digits-small] [--quick]

One Ray instance (``num_cpus=4``, the same Serve proxy) holds two apps over the same TorchScript
file: ``timeshare`` (``router.app.build_app``, test environment, default settings: with no GPU the
CPU pool runs in the ingress replica) and ``stock``, a ``@serve.deployment`` that parses the same
KServe v2 JSON, runs the forward pass in-process on its event loop (the fastest stock shape for a
model this small) and answers v2 JSON. A null server (fixed answers, no parsing) runs in its own
process. The load client runs in another process: raw asyncio streams with keep-alive, so it is
not the bottleneck on 2 cores; its own cost is the null server's figures.

Arms: ``timeshare`` (cache bypassed: ``cache_skip_read``/``cache_skip_write``), ``timeshare_hit``
(the same body as a cache hit), ``stock``, ``null``, and ``stock_uvicorn`` (the stock handler
under plain uvicorn in its own process, closed loop only: Serve's per-request share); over HTTP
v2 JSON and over the handle (Timeshare's typed client ``TimeshareClient.infer_async``, whose
concurrent calls share handle calls, and the bare ``infer.remote(InferenceRequest)`` as
``timeshare_raw``, vs the stock deployment's ``infer.remote(array)``; every handle arm pickles
its calls with plain pickle, the typed client's default and the fastest for stock's array too),
and the in-process forward pass.

Runs: closed loop at concurrency 1 and 16 (``--closed-s`` each, after a warm-up), in
``--rounds`` interleaved rounds: each round runs every arm for its share of ``--closed-s``, in
an order rotated from round to round, and an arm's figures pool its rounds. On a shared host a
burst from a neighbour then falls on every arm alike rather than on the one that happened to run
through it, which is what moved the ratios most between runs (docs/PERFORMANCE.md). Then an open
loop rate sweep (Poisson arrivals, ``--open-s`` per rate) per HTTP arm; an arm's knee is the
highest rate whose p99 stays under 100 ms with at least 95 % of the requests scheduled in the
measured window answered by the model (a degraded answer, such as a request shed to its
fallback, is counted as ``n_degraded``, never as served: ``benchmarks._http_client``), below
the first rate that fails.

Each closed-loop run also reports ``server_cpu_us_per_answer``: the CPU time (all threads) of the
process listening on the arm's port over the run, per answer (``benchmarks._proc_cpu``, Linux
``/proc``; None elsewhere, and for the Serve arms with ``--ingress proxy``, whose port is the
proxy's). ``server_cpu_us_per_answer_c16`` compares them at c=16: on a shared
host they move less between runs than throughput does, and they are what a request costs the
server. Not a target. The ``timeshare`` arm's closed-loop runs also report what the ingress's CPU
pool did (``device``: its chunks, the share run inline on the loop, and ``inline_waits``, the
chunks that waited for the device thread's batch to run inline after it; from ``/v2/status``):
a chunk sent to the device thread costs the loop a hop, which at c=16 was most of the spread
between runs (docs/PERFORMANCE.md, "Inline stayed off", "The thread fed itself"). Each
handle run reports the same for the replica that answers (``replica_cpu_us_per_answer``) and
for the calling process (``caller_cpu_us_per_answer``);
``handle_c16_*_replica_cpu_vs_stock`` gives Timeshare's replica figures over stock's.

Targets (``meets_targets`` when all hold; issue 38's): HTTP p50 at concurrency 1 at most stock's
+ 0.3 ms; throughput at concurrency 16 at least 1.05x stock's; cache-hit throughput at least 2.5x
stock's; handle throughput at concurrency 16 (Timeshare's typed client) at least stock's handle;
and, from before, the knee at least stock's. Defaults are what ``make serve`` runs: Ray Serve's
settings from ``deploy.ray_env`` (throughput-optimized mode) and Serve's logging config from
``deploy/config.yaml`` (access log off; ``--access-log on``) for both apps alike, ``--ingress
listener`` and a rate sweep from 250 to 4000 req/s. ``--ray-env KEY=VALUE`` (repeatable) sets Ray
Serve environment settings before Ray starts (``RAY_SERVE_THROUGHPUT_OPTIMIZED=0`` for Ray's
defaults).
``--ingress direct`` turns on Ray Serve's direct ingress (``RAY_SERVE_ENABLE_DIRECT_INGRESS=1``,
also implied by throughput-optimized mode) and sends the HTTP arms to each app's ingress replica
on its own port (read from the controller's target groups) instead of through Serve's proxy: the
proxy hop's share is then the difference to a ``--ingress proxy`` run. ``--ingress listener``
(what ``deploy/config.yaml`` serves) sends Timeshare's arms to its own listener in the ingress
replica (``router.listener``: uvicorn on the ingress's ASGI app, without Serve's per-request
wrapper) and stock's to its direct-ingress port, the strongest stock setting measured.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import platform
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._device_status import chunks_delta, device_counters
from benchmarks._handle_load import handle_ratios, handle_runs
from benchmarks._handle_load import latency_stats as _stats
from benchmarks._http_client import LoadSpec, null_server, run_load
from benchmarks._output import emit, stdout_to_stderr
from benchmarks._proc_cpu import CpuMeter, cpu_model, listening_pid
from benchmarks._serve_net import free_port, replica_port, wait_serving
from benchmarks._stock import serve_stock, stock_app
from deploy.ray_env import ENV, served_logging_config

P99_LIMIT_MS = 100.0
DEMO_REPO = Path(__file__).resolve().parent.parent / "var" / "model_repository"


def _repository(root: Path, model: str) -> tuple[Path, Path, dict]:
    import yaml

    from deploy.demo import build_demo_repository
    from pool.repository import version_order

    repo = root / "repo"
    if (DEMO_REPO / model / "config.yaml").exists():
        shutil.copytree(DEMO_REPO / model, repo / model)  # copy2 keeps mtimes: settled at once
    else:
        build_demo_repository(root / "_build", only=[model])
        shutil.copytree(root / "_build" / model, repo / model)
    cfg = yaml.safe_load((repo / model / "config.yaml").read_text())
    versions = sorted((p for p in (repo / model).iterdir() if (p / "model.pt").exists()),
                      key=lambda p: version_order(p.name))
    return repo, versions[-1] / "model.pt", cfg


def _body(in_name: str, x: np.ndarray, *, bypass: bool) -> bytes:
    body: dict[str, Any] = {"inputs": [{"name": in_name, "shape": list(x.shape),
                                        "datatype": "FP32", "data": x.ravel().tolist()}]}
    if bypass:
        body["parameters"] = {"cache_skip_read": True, "cache_skip_write": True}
    return json.dumps(body).encode()


def _forward_stats(path: Path, threads: int, x: np.ndarray, n: int = 2000) -> dict:
    torch.set_num_threads(threads)
    m = torch.jit.load(str(path), map_location="cpu").eval()
    t = torch.from_numpy(x)
    with torch.inference_mode():
        for _ in range(50):
            m(t)
        lat = []
        for _ in range(n):
            t0 = time.perf_counter()
            m(t)
            lat.append(time.perf_counter() - t0)
    return _stats(lat, sum(lat), 0)


def _knee(sweep: dict[str, dict]) -> float:
    """The highest rate, below the first that fails, whose p99 is under the limit with >= 95 %
    of its requests answered by the model: shedding more at a higher rate cannot pass it."""
    knee = 0.0
    for rate, s in sorted(sweep.items(), key=lambda kv: float(kv[0])):
        if s.get("p99_ms", 1e9) >= P99_LIMIT_MS or s["n"] < 0.95 * s["scheduled"]:
            break
        knee = float(rate)
    return knee


def _targets(http: dict, knees: dict, handle: dict) -> dict[str, Any]:
    """Issue 38's bounds (HTTP c=1 overhead, c=16 throughput, cache hits, the handle at c=16),
    and the knee's from before it."""
    c1 = {a: http[a]["c1"] for a in http}
    c16 = {a: http[a]["c16"] for a in http}
    overhead = round(c1["timeshare"]["p50_ms"] - c1["stock"]["p50_ms"], 3)
    ratio = round(c16["timeshare"]["throughput_rps"] / c16["stock"]["throughput_rps"], 3)
    hit = round(c16["timeshare_hit"]["throughput_rps"] / c16["stock"]["throughput_rps"], 3)
    knee = round(knees["timeshare"] / knees["stock"], 3) if knees["stock"] else None
    h = handle_ratios(handle).get("handle_c16_rps_vs_stock")
    out = {
        "p50_overhead_c1_ms": {"value": overhead, "target": "<= 0.3", "met": overhead <= 0.3},
        "throughput_c16_vs_stock": {"value": ratio, "target": ">= 1.05", "met": ratio >= 1.05},
        "cache_hit_throughput_c16_vs_stock": {"value": hit, "target": ">= 2.5", "met": hit >= 2.5},
        "handle_throughput_c16_vs_stock": {"value": h, "target": ">= 1.0",
                                           "met": h is not None and h >= 1.0},
        "knee_vs_stock": {"value": knee, "target": ">= 1.0",
                          "met": knee is not None and knee >= 1.0},
        "stretch_http_p50_c1_ms": {"value": c1["timeshare"]["p50_ms"], "target": "<= 3.0",
                                   "met": c1["timeshare"]["p50_ms"] <= 3.0},
    }
    return out


def _cpu_us(r: dict) -> float | None:
    """CPU µs the arm's server process spent per answer (its cores over its answers/s)."""
    answers = (len(r["latencies_s"]) + r["n_degraded"]) / r["duration_s"]
    cores = r.get("server_cores")
    return round(cores / answers * 1e6, 1) if cores is not None and answers > 0 else None


def _pooled(runs: list[dict]) -> dict:
    """One arm's closed-loop rounds as one run: latencies and counts pooled, durations added,
    server cores and the pool's inline share weighted by duration and by chunks."""
    duration = sum(r["duration_s"] for r in runs)
    out: dict[str, Any] = {
        "latencies_s": [t for r in runs for t in r["latencies_s"]], "duration_s": duration,
        "n_errors": sum(r["n_errors"] for r in runs),
        "n_degraded": sum(r["n_degraded"] for r in runs),
        "errors": [e for r in runs for e in r["errors"]][:5],
        "server_cores": (None if any(r.get("server_cores") is None for r in runs) else
                         sum(r["server_cores"] * r["duration_s"] for r in runs) / duration)}
    devices = [r["device"] for r in runs if "device" in r]
    if devices:
        known = [d for d in devices if d is not None]
        chunks = sum(d["chunks"] for d in known)
        out["device"] = None if len(known) < len(devices) else {
            "chunks": chunks, "inline_share": round(
                sum((d["inline_share"] or 0.0) * d["chunks"] for d in known) / chunks, 3)
            if chunks else None,
            "inline_waits": sum(d.get("inline_waits", 0) for d in known)}
    return out


def _closed_rounds(load, args: argparse.Namespace, arms, concurrency: int) -> dict[str, dict]:
    """``args.rounds`` rounds of every arm at ``concurrency``, the order rotated each round
    (a full warm-up before an arm's first round, a short one before the others)."""
    order = list(arms)
    runs: dict[str, list[dict]] = {arm: [] for arm in order}
    for i in range(args.rounds):
        k = i % len(order)
        for arm in order[k:] + order[:k]:
            runs[arm].append(load(arm, duration_s=args.closed_s / args.rounds,
                                  concurrency=concurrency, warmup_s=1.0 if i == 0 else 0.3))
    return {arm: _pooled(rs) for arm, rs in runs.items()}


def _http_runs(load, args: argparse.Namespace, arms) -> tuple[dict, dict]:
    """Closed loop at c=1 and c=16 for every arm (interleaved rounds), then the open-loop
    sweep per server arm."""
    http: dict[str, dict] = {arm: {} for arm in arms}
    for c in (1, 16):
        for arm, r in _closed_rounds(load, args, arms, c).items():
            http[arm][f"c{c}"] = {**_stats(r["latencies_s"], r["duration_s"], r["n_errors"]),
                                  "n_degraded": r["n_degraded"], "errors": r["errors"],
                                  "server_cpu_us_per_answer": _cpu_us(r)}
            if "device" in r:
                http[arm][f"c{c}"]["device"] = r["device"]
    sweeps: dict[str, dict] = {}
    for arm in ("timeshare", "timeshare_hit", "stock"):
        sweeps[arm] = {}
        for rate in args.rates:
            r = load(arm, duration_s=args.open_s, rate=rate, warmup_s=0.5)
            sweeps[arm][str(rate)] = {**_stats(r["latencies_s"], r["duration_s"], r["n_errors"]),
                                      "n_degraded": r["n_degraded"], "scheduled": r["scheduled"],
                                      "errors": r["errors"]}
            over = [v.get("p99_ms", 1e9) >= P99_LIMIT_MS for v in sweeps[arm].values()]
            if len(over) >= 2 and over[-1] and over[-2]:
                break  # two rates past the knee in a row: higher ones only queue more
    return http, sweeps


def _arm_targets(args, port: int, listener_port: int, side: dict[str, int], in_name: str,
                 x: np.ndarray) -> dict[str, tuple[int, str, bytes]]:
    """Each HTTP arm's (port, path, body) for ``args.ingress``."""
    ts_path = f"/v2/models/{args.model}/infer"
    ts_port = stock_port = port
    if args.ingress in ("direct", "listener"):
        ts_port, stock_port = replica_port("timeshare"), replica_port("stock")
    if args.ingress == "listener":
        ts_port = listener_port
    return {
        "timeshare": (ts_port, ts_path, _body(in_name, x, bypass=True)),
        "timeshare_hit": (ts_port, ts_path, _body(in_name, x, bypass=False)),
        "stock": (stock_port, "/stock", _body(in_name, x, bypass=False)),
        "stock_uvicorn": (side["stock_uvicorn"], "/stock", _body(in_name, x, bypass=False)),
        "null": (side["null"], "/", _body(in_name, x, bypass=False)),
    }


class _Loads:
    """Runs the load client against an arm, metering the CPU of the arm's server process."""

    def __init__(self, client, targets: dict[str, tuple[int, str, bytes]]) -> None:
        self.client, self.targets = client, targets
        self.pids: dict[str, int | None] = {}

    def find_servers(self, skip: tuple[str, ...] = ()) -> None:
        """The process listening on each arm's port (once every server is up)."""
        self.pids = {arm: listening_pid(t[0]) for arm, t in self.targets.items()
                     if arm not in skip}

    def __call__(self, arm: str, **kw: Any) -> dict:
        port, route, body = self.targets[arm]
        meter = CpuMeter(self.pids.get(arm))
        before = device_counters(port) if arm == "timeshare" else None
        meter.start()
        r = self.client.submit(run_load, LoadSpec("127.0.0.1", port, route, body, **kw)).result()
        out = {**r, "server_cores": meter.stop()}
        if before is not None:
            out["device"] = chunks_delta(before, device_counters(port))
        return out


def _serve_and_measure(args, repo: Path, path: Path, in_name: str, x: np.ndarray,
                       threads: int, client, side: dict[str, int]) -> dict[str, Any]:
    import ray
    from ray import serve

    from router.app import build_app

    port = free_port()
    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        ts_args: dict[str, Any] = {"repository": str(repo), "environment": "test",
                                   **args.ts_args}
        listener_port = free_port()
        if args.ingress == "listener":
            ts_args["listener"] = {"port": listener_port}
        logs = {"enable_access_log": _access_log(args)}
        serve.run(build_app(ts_args), name="timeshare", route_prefix="/", logging_config=logs)
        serve.run(stock_app(str(path), threads, args.model), name="stock",
                  route_prefix="/stock", logging_config=logs)
        targets = _arm_targets(args, port, listener_port, side, in_name, x)
        load = _Loads(client, targets)
        wait_serving(lambda: load("timeshare", duration_s=0.2, warmup_s=0.0), "timeshare")
        # through Serve's proxy the port's process is the proxy alone: no per-answer figure
        load.find_servers(skip=("timeshare", "timeshare_hit", "stock")
                          if args.ingress == "proxy" else ())
        answers = {a: json.loads(load(a, duration_s=0.5, warmup_s=0.5)["body"])
                   for a in ("timeshare", "timeshare_hit", "stock")}
        same = {a: bool(np.allclose(answers[a]["outputs"][0]["data"],
                                    answers["stock"]["outputs"][0]["data"], atol=1e-4))
                for a in answers}
        http, sweeps = _http_runs(load, args, targets)
        try:
            ts_port = targets["timeshare"][0]
            handle = handle_runs(args, in_name, x, device=lambda: device_counters(ts_port),
                                 device_delta=chunks_delta)
        except Exception as e:  # noqa: BLE001 - the HTTP figures stand without the handle's
            handle = {"error": f"{type(e).__name__}: {e}"}
    finally:
        try:
            serve.shutdown()
        except RuntimeError:  # a handle bound to the closed loop of the handle runs (above)
            pass
        ray.shutdown()
    return {"http": http, "sweeps": sweeps, "handle": handle, "same": same,
            "ray": ray.__version__}


def _access_log(args: argparse.Namespace) -> bool:
    """``--access-log``, else ``make serve``'s setting (deploy/config.yaml) for both apps."""
    if args.access_log is not None:
        return bool(args.access_log == "on")
    return bool(served_logging_config().get("enable_access_log", True))


def _ray_env(args: argparse.Namespace) -> list[str]:
    """``make serve``'s Ray Serve settings, then ``--ray-env``'s (later ones win)."""
    return [f"{k}={v}" for k, v in ENV.items()] + list(args.ray_env)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pool.service import cpu_threads_per_replica

    tmp = Path(tempfile.mkdtemp(prefix="timeshare-http-"))
    repo, path, cfg = _repository(tmp, args.model)
    in_name, shape = cfg["inputs"][0]["name"], [int(d) for d in cfg["inputs"][0]["shape"]]
    x = np.random.default_rng(0).standard_normal([1, *shape]).astype(np.float32)
    threads = cpu_threads_per_replica(1)
    forward = _forward_stats(path, threads, x)
    for kv in _ray_env(args):
        k, _, v = kv.partition("=")
        os.environ[k] = v
    if args.ingress in ("direct", "listener"):
        os.environ["RAY_SERVE_ENABLE_DIRECT_INGRESS"] = "1"
    ctx = mp.get_context("spawn")
    side = {"null": free_port(), "stock_uvicorn": free_port()}
    ready, stock_ready = ctx.Event(), ctx.Event()
    null_proc = ctx.Process(target=null_server, args=(side["null"], ready), daemon=True)
    uv_proc = ctx.Process(target=serve_stock, daemon=True, args=(
        str(path), side["stock_uvicorn"], threads, args.model, stock_ready))
    null_proc.start()
    uv_proc.start()
    ready.wait(30)
    stock_ready.wait(60)
    client = ProcessPoolExecutor(1, mp_context=ctx)
    try:
        m = _serve_and_measure(args, repo, path, in_name, x, threads, client, side)
    finally:
        client.shutdown()
        null_proc.kill()
        uv_proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return _report(args, forward, m)


def _report(args: argparse.Namespace, forward: dict, m: dict) -> dict[str, Any]:
    http, handle = m["http"], m["handle"]
    knees = {a: _knee(s) for a, s in m["sweeps"].items()}
    checks = _targets(http, knees, handle)
    return {
        "benchmark": "http_throughput",
        "model": args.model,
        "ray_env": _ray_env(args),
        "ingress": args.ingress,
        "ts_args": args.ts_args,
        "closed_loop": {"seconds_per_arm": args.closed_s, "rounds": args.rounds,
                        "arms": "interleaved, order rotated each round"},
        "serve_access_log": _access_log(args),
        "forward_in_process": forward,
        "http": http,
        "client_overhead": {"null_c1_p50_ms": http["null"]["c1"]["p50_ms"],
                            "null_c16_rps": http["null"]["c16"]["throughput_rps"]},
        "open_loop": m["sweeps"],
        "knee_rps": knees,
        "handle": handle,
        "ratios": {
            "http_c1_p50_vs_stock": round(http["timeshare"]["c1"]["p50_ms"]
                                          / http["stock"]["c1"]["p50_ms"], 3),
            "http_c16_rps_vs_stock": checks["throughput_c16_vs_stock"]["value"],
            "http_hit_c16_rps_vs_stock": checks["cache_hit_throughput_c16_vs_stock"]["value"],
            **handle_ratios(handle),
            "knee_vs_stock": checks["knee_vs_stock"]["value"],
            # the share of a stock request that is Serve's wrapper (same handler, plain uvicorn)
            "stock_c16_rps_serve_over_plain_uvicorn": round(
                http["stock"]["c16"]["throughput_rps"]
                / http["stock_uvicorn"]["c16"]["throughput_rps"], 3),
        },
        "server_cpu_us_per_answer_c16": _cpu_figures(http),
        "answers_match_stock": m["same"],
        "targets": checks,
        "meets_targets": all(v["met"] for k, v in checks.items() if not k.startswith("stretch")),
        "machine": {"cpus": os.cpu_count(), "cpu_model": cpu_model(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "ray": m["ray"]},
    }


def _cpu_figures(http: dict) -> dict[str, float | None]:
    """Each arm's server CPU per answer at c=16, and Timeshare's over stock's (lower is
    cheaper): steadier than throughput ratios on a shared host, not a target."""
    us = {a: http[a]["c16"].get("server_cpu_us_per_answer") for a in http}
    stock = us.get("stock")
    for arm in ("timeshare", "timeshare_hit"):
        mine = us.get(arm)
        us[f"{arm}_vs_stock"] = round(mine / stock, 3) if mine and stock else None
    return us


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the JSON object to this file")
    p.add_argument("--model", default="digits-small")
    p.add_argument("--closed-s", type=float, default=5.0,
                   help="seconds per arm and concurrency in closed loop, over all rounds")
    p.add_argument("--rounds", type=int, default=3,
                   help="closed-loop rounds, the arms interleaved (1: each arm in one run)")
    p.add_argument("--open-s", type=float, default=4.0, help="seconds per open-loop rate")
    p.add_argument("--handle-s", type=float, default=3.0, help="seconds per handle run")
    p.add_argument("--rates", type=float, nargs="+",
                   default=[250, 500, 1000, 1500, 2000, 3000, 4000])
    p.add_argument("--ray-env", action="append", default=[], metavar="KEY=VALUE",
                   help="on top of deploy.ray_env's settings (make serve's)")
    p.add_argument("--ingress", choices=("proxy", "direct", "listener"), default="listener",
                   help="HTTP through Serve's proxy, or straight to each app's replica port; "
                        "listener: Timeshare's arms to its own listener (router.listener), "
                        "stock's to its direct-ingress port")
    p.add_argument("--access-log", choices=("on", "off"),
                   help="Serve's access log in both apps (default: as deploy/config.yaml)")
    p.add_argument("--ts-args", type=json.loads, default={}, metavar="JSON",
                   help='Timeshare app args on top of the benchmark\'s, e.g. '
                        '\'{"cpu_pool": {"inline_ms": 0}}\' (every chunk on the device thread)')
    p.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds: at least 1")
    if args.quick:
        args.closed_s, args.open_s, args.handle_s, args.rates = 1.5, 1.5, 1.0, [50, 150]
    with stdout_to_stderr():
        result = run(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
