"""gRPC against HTTP: the same Timeshare app, the same model, the same request, two protocols.

    python -m benchmarks.grpc_throughput --json out.json [--model digits-small] [--quick]

One Ray instance runs Timeshare (``router.app.build_app``, test environment, as ``make serve``:
Ray Serve's settings from ``deploy.ray_env``, HTTP on Timeshare's own listener, gRPC on its
gRPC listener, both in the ingress replica). Arms, closed loop at concurrency 1 and 16:

- ``http``: ``POST /v2/models/{model}/infer``, v2 JSON, cache bypassed
  (``cache_skip_read``/``cache_skip_write``), by ``benchmarks._http_client`` (raw asyncio);
- ``grpc``: ``ModelInfer`` with the same tensor as ``raw_input_contents`` (what
  ``tritonclient.grpc`` sends) and the same parameters, by ``benchmarks._grpc_client``
  (``grpc.aio``, one channel);
- ``http_null`` / ``grpc_null``: each client against its null server (fixed answers, in its own
  process): the client's own cost, measured in the same run.

Each client runs in its own process. ``server_cpu_us_per_answer``: the ingress replica's CPU (all
threads) per answer (``benchmarks._proc_cpu``). Targets (#39): gRPC p50 at c=1 at most HTTP's,
gRPC throughput at c=16 at least 1.2x HTTP's.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import platform
import shutil
import tempfile
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._grpc_client import null_grpc_server, run_grpc_load
from benchmarks._handle_load import latency_stats
from benchmarks._http_client import LoadSpec, null_server, run_load
from benchmarks._output import emit, stdout_to_stderr
from benchmarks._proc_cpu import CpuMeter, listening_pid
from benchmarks._serve_net import free_port, wait_serving
from benchmarks.http_throughput import _body, _repository
from deploy.ray_env import ENV, served_logging_config
from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb


def _grpc_body(model: str, in_name: str, x: np.ndarray) -> bytes:
    req = pb.ModelInferRequest(model_name=model)
    req.inputs.add(name=in_name, datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.astype("<f4").tobytes())
    req.parameters["cache_skip_read"].bool_param = True
    req.parameters["cache_skip_write"].bool_param = True
    return req.SerializeToString()


class _Arms:
    """Runs one arm's client in the client process, metering its server's CPU."""

    def __init__(self, client: ProcessPoolExecutor, ports: dict[str, int],
                 bodies: dict[str, bytes], path: str) -> None:
        self.client, self.ports, self.bodies, self.path = client, ports, bodies, path
        self.pids: dict[str, int | None] = {}

    def find_servers(self) -> None:
        self.pids = {arm: listening_pid(port) for arm, port in self.ports.items()}

    def __call__(self, arm: str, *, duration_s: float, concurrency: int = 1,
                 warmup_s: float = 0.5) -> dict[str, Any]:
        port, body = self.ports[arm], self.bodies[arm]
        meter = CpuMeter(self.pids.get(arm))
        meter.start()
        if arm.startswith("grpc"):
            fut = self.client.submit(run_grpc_load, port, body, duration_s=duration_s,
                                     concurrency=concurrency, warmup_s=warmup_s)
        else:
            fut = self.client.submit(run_load, LoadSpec(
                "127.0.0.1", port, self.path if arm == "http" else "/", body,
                duration_s=duration_s, concurrency=concurrency, warmup_s=warmup_s))
        r = fut.result()
        return {**r, "server_cores": meter.stop()}


def _cpu_us(r: dict) -> float | None:
    answers = (len(r["latencies_s"]) + r["n_degraded"]) / r["duration_s"]
    cores = r.get("server_cores")
    return round(cores / answers * 1e6, 1) if cores is not None and answers > 0 else None


def _measure(args: argparse.Namespace, arms: _Arms) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for _ in range(args.rounds):  # interleaved rounds: drift on a shared host hits every arm
        for arm in ("http", "grpc", "http_null", "grpc_null"):
            for c in (1, 16):
                r = arms(arm, duration_s=args.closed_s, concurrency=c, warmup_s=1.0)
                row = {**latency_stats(r["latencies_s"], r["duration_s"], r["n_errors"]),
                       "n_degraded": r["n_degraded"], "errors": r["errors"],
                       "server_cpu_us_per_answer": _cpu_us(r)}
                out.setdefault(arm, {}).setdefault(f"c{c}", []).append(row)
    # per arm and concurrency: the round with the median throughput
    return {arm: {c: sorted(rows, key=lambda s: s.get("throughput_rps", 0))[len(rows) // 2]
                  for c, rows in by_c.items()} for arm, by_c in out.items()}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray
    from ray import serve

    from router.app import build_app

    tmp = Path(tempfile.mkdtemp(prefix="timeshare-grpc-"))
    repo, _, cfg = _repository(tmp, args.model)
    in_name, shape = cfg["inputs"][0]["name"], [int(d) for d in cfg["inputs"][0]["shape"]]
    x = np.random.default_rng(0).standard_normal([1, *shape]).astype(np.float32)
    for k, v in ENV.items():
        os.environ.setdefault(k, v)
    ctx = mp.get_context("spawn")
    ports = {"http": free_port(), "grpc": free_port(), "http_null": free_port(),
             "grpc_null": free_port()}
    ready_http, ready_grpc = ctx.Event(), ctx.Event()
    nulls = [ctx.Process(target=null_server, args=(ports["http_null"], ready_http), daemon=True),
             ctx.Process(target=null_grpc_server, args=(ports["grpc_null"], ready_grpc),
                         daemon=True)]
    for p in nulls:
        p.start()
    ready_http.wait(30)
    ready_grpc.wait(30)
    client = ProcessPoolExecutor(1, mp_context=ctx)
    ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})
        ts_args = {"repository": str(repo), "environment": "test",
                   "listener": {"port": ports["http"]}, "grpc": {"port": ports["grpc"]}}
        logs = {"enable_access_log": bool(served_logging_config().get("enable_access_log",
                                                                      True))}
        serve.run(build_app(ts_args), name="timeshare", route_prefix="/", logging_config=logs)
        bodies = {"http": _body(in_name, x, bypass=True),
                  "grpc": _grpc_body(args.model, in_name, x),
                  "http_null": _body(in_name, x, bypass=True),
                  "grpc_null": _grpc_body(args.model, in_name, x)}
        arms = _Arms(client, ports, bodies, f"/v2/models/{args.model}/infer")
        for arm in ("http", "grpc"):
            wait_serving(partial(arms, arm, duration_s=0.2, warmup_s=0.0), f"timeshare {arm}")
        arms.find_servers()
        figures = _measure(args, arms)
    finally:
        client.shutdown()
        for p in nulls:
            p.kill()
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return _report(args, figures, ray.__version__)


def _report(args: argparse.Namespace, f: dict[str, dict], ray_version: str) -> dict[str, Any]:
    c1_ratio = round(f["grpc"]["c1"]["p50_ms"] / f["http"]["c1"]["p50_ms"], 3)
    c16_ratio = round(f["grpc"]["c16"]["throughput_rps"] / f["http"]["c16"]["throughput_rps"], 3)
    targets = {
        "grpc_p50_c1_vs_http": {"value": c1_ratio, "target": "<= 1.0", "met": c1_ratio <= 1.0},
        "grpc_rps_c16_vs_http": {"value": c16_ratio, "target": ">= 1.2",
                                 "met": c16_ratio >= 1.2},
    }
    return {
        "benchmark": "grpc_throughput",
        "model": args.model,
        "closed_s": args.closed_s,
        "rounds": args.rounds,
        "arms": f,
        "client_overhead": {
            "http_null_c1_p50_ms": f["http_null"]["c1"]["p50_ms"],
            "grpc_null_c1_p50_ms": f["grpc_null"]["c1"]["p50_ms"],
            "http_null_c16_rps": f["http_null"]["c16"]["throughput_rps"],
            "grpc_null_c16_rps": f["grpc_null"]["c16"]["throughput_rps"],
        },
        "server_cpu_us_per_answer_c16": {a: f[a]["c16"]["server_cpu_us_per_answer"]
                                         for a in ("http", "grpc")},
        "targets": targets,
        "meets_targets": all(t["met"] for t in targets.values()),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "ray": ray_version},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the JSON object to this file")
    p.add_argument("--model", default="digits-small")
    p.add_argument("--closed-s", type=float, default=5.0, help="seconds per closed-loop run")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median kept)")
    p.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.closed_s, args.rounds = 1.5, 1
    with stdout_to_stderr():
        result = run(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
