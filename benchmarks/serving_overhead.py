"""Serving overhead: a tiny model called directly, through the Timeshare handle, through HTTP v2,
and through a bare Ray Serve deployment of the same model, side by side in one run.

    python -m benchmarks.serving_overhead --json out.json [--n 500] [--model iris-mlp1x16]

One Ray instance (``num_cpus=4``) holds four Serve apps: ``timeshare`` (the real app from
``router.app.build_app`` over a temporary model repository, default settings: with no GPU the CPU
pool runs inside the ingress replica, one Serve hop), ``timeshare-pool-deployment`` (the same with
``cpu_pool.placement: deployment``, as when GPUs exist: ingress -> pool, two hops), ``bare``
(a minimal
``@serve.deployment`` that ``torch.jit.load``s the same ``model.pt`` and runs it on a numpy array)
and ``bare-chain`` (the same bare model behind a bare forwarding deployment: two Serve hops, like
Timeshare's ingress -> pool). The repository holds the model as the demo builder configured it
(``batch_wait_ms`` 2.0: the pool worker waits up to 2 ms to fill a batch when the model's arrivals
suggest another request is coming; a lone caller on a quiet model does not wait)
and a copy ``<model>-nowait`` with ``batch_wait_ms: 0``, so the batching wait shows apart.

Arms (batch of one row, closed loop: one call at a time from the driver):
  direct        torch.jit.load + forward under inference_mode, in the driver process
  bare          the bare deployment through its handle (the baseline of the target)
  bare_chain    the two-hop bare reference through its handle
  handle        serve.get_app_handle("timeshare").infer.remote(InferenceRequest(...)).result()
  handle_nowait the same, on the batch_wait_ms 0 copy
  handle_pool_deployment  the handle of the app whose CPU pool is its own deployment
  http          POST /v2/models/<model>/infer (v2 JSON), httpx keep-alive client
  http_nowait   the same, on the batch_wait_ms 0 copy

Every arm gets ``--warmup`` calls first, then the ``--n`` measured calls are split into
``--rounds`` rounds and the arms run in a shuffled order each round, so machine noise falls on all
arms alike. Inputs are fresh random rows (cache reads and writes skipped) and every answer is
checked against the direct forward (``output_mismatches``).

How to read the output:
  arms             p50/p99/mean latency in ms per arm.
  ratio_vs_direct  p50 (and p99) of each arm over the direct call.
  key              the target: ``handle_minus_bare_p50_ms`` is what the Timeshare handle adds at
                   p50 over the bare deployment, against ``target_ms`` (3); ``target_met``.
                   ``second_hop_p50_ms`` (bare_chain - bare) is what one more Serve hop costs on
                   this machine; ``handle_minus_bare_chain_p50_ms`` is what Timeshare adds beyond
                   its two hops (pipeline, validation, worker queue and batching, pydantic).
  key_nowait       the same for the batch_wait_ms 0 copy.
  key_pool_deployment  the same for the two-hop placement.
  batching_wait_p50_ms  handle - handle_nowait at p50: what the batching wait costs a lone caller.
  breakdown        medians of the response timings seen by the driver: ``queue_ms`` (pool
                   queue, including the batching wait), ``compute_ms``, ``ingress_total_ms``
                   (pipeline arrival to answer), ``transport_ms`` (driver round trip minus
                   ingress total: the driver -> ingress hop) and
                   ``ingress_minus_queue_compute_ms`` (mostly the ingress -> pool hop).
Figures on a loaded 2-core machine are dominated by Ray's per-hop cost; compare arms within one
run, not across runs.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from benchmarks._output import emit, stdout_to_stderr
from benchmarks._overhead_report import measure_rounds, overhead_report
from benchmarks._serve_net import free_port

APP = "timeshare"
COLO_APP = "timeshare-pool-deployment"
BARE_APP = "bare"
CHAIN_APP = "bare-chain"
DEMO_REPO = Path(__file__).resolve().parent.parent / "var" / "model_repository"


def _prepare_repository(root: Path, model: str, source: Path | None) -> tuple[Path, str]:
    """Copy (or build) ``model`` into ``root`` plus a ``batch_wait_ms: 0`` copy; return the
    repository and the no-wait model's name."""
    src = source / model if source is not None else None
    if src is None or not (src / "config.yaml").exists():
        from deploy.demo import build_demo_repository

        build_demo_repository(root / "_build", only=[model])
        src = root / "_build" / model
    repo = root / "repo"
    repo.mkdir()
    shutil.copytree(src, repo / model)  # copy2 keeps mtimes: versions count as settled at once
    nowait = f"{model}-nowait"
    shutil.copytree(src, repo / nowait)
    cfg = yaml.safe_load((repo / nowait / "config.yaml").read_text())
    cfg.update(name=nowait, batch_wait_ms=0.0)
    (repo / nowait / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return repo, nowait


def _model_path(repo: Path, model: str) -> tuple[Path, dict[str, Any]]:
    cfg = yaml.safe_load((repo / model / "config.yaml").read_text())
    from pool.repository import version_order

    versions = sorted(
        (p for p in (repo / model).iterdir() if (p / "model.pt").exists()),
        key=lambda p: version_order(p.name),
    )
    return versions[-1] / "model.pt", cfg  # the default version: the newest


def _bare_deployment():
    """A minimal Ray Serve deployment of a TorchScript model: the baseline."""
    from ray import serve

    @serve.deployment(name="Bare", max_ongoing_requests=256)
    class Bare:
        def __init__(self, path: str, n_threads: int) -> None:
            torch.set_num_threads(n_threads)
            self.model = torch.jit.load(path, map_location="cpu").eval()

        def __call__(self, x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return self.model(torch.from_numpy(x)).numpy()

    return Bare


def _chain_app(model_path: str, threads: int):
    """Reference: the bare model behind a bare forwarding deployment (two Serve hops, as the
    Timeshare path has: ingress -> pool). Zero logical CPUs so it fits the 4 of ``ray.init``."""
    from ray import serve

    @serve.deployment(name="BareFront", max_ongoing_requests=256, ray_actor_options={"num_cpus": 0})
    class BareFront:
        def __init__(self, inner) -> None:
            self.inner = inner

        async def __call__(self, x: np.ndarray) -> np.ndarray:
            return await self.inner.remote(x)

    inner = _bare_deployment().options(name="BareInner", ray_actor_options={"num_cpus": 0})
    return BareFront.bind(inner.bind(model_path, threads))  # type: ignore[attr-defined]


def _wait_ready(client, timeout_s: float = 120.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = client.get("/v2/health/ready")
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}"
        except httpx.TransportError as e:  # the proxy is still starting
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    raise TimeoutError(f"timeshare app not ready within {timeout_s:.0f}s ({last})")


def _handle_call(app, model: str, in_name: str, out_name: str, no_cache: Any,
                 last: dict[str, Any]) -> Callable[[np.ndarray], np.ndarray]:
    """A call through a Timeshare app's handle; leaves the response's timings in ``last``."""
    from router.schemas import InferenceRequest

    def call(x: np.ndarray) -> np.ndarray:
        resp = app.infer.remote(
            InferenceRequest(model=model, inputs={in_name: x}, cache=no_cache)
        ).result()
        last[model] = resp.timings
        return np.asarray(resp.outputs[out_name])

    return call


def _http_call(http, model: str, in_name: str) -> Callable[[np.ndarray], np.ndarray]:
    """A v2 JSON call over ``http`` (cache reads and writes skipped)."""
    url = f"/v2/models/{model}/infer"

    def call(x: np.ndarray) -> np.ndarray:
        body = {
            "inputs": [
                {
                    "name": in_name,
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "data": x.ravel().tolist(),
                }
            ],
            "parameters": {"cache_skip_read": True, "cache_skip_write": True},
        }
        r = http.post(url, json=body)
        r.raise_for_status()
        out = r.json()["outputs"][0]
        return np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])

    return call


def _arm_calls(apps: dict[str, Any], http, direct_model, in_name: str, out_name: str,
               model: str, nowait: str, last: dict[str, Any]
               ) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """One call per arm (see the module's docstring); the handle arms leave the response's
    timings in ``last[model]``."""
    from router.schemas import CacheControl

    handle, colo, bare, chain = apps[APP], apps[COLO_APP], apps[BARE_APP], apps[CHAIN_APP]
    no_cache = CacheControl(skip_read=True, skip_write=True)

    def direct(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return direct_model(torch.from_numpy(x)).numpy()

    def via_bare(x: np.ndarray) -> np.ndarray:
        return bare.remote(x).result()

    def via_chain(x: np.ndarray) -> np.ndarray:
        return chain.remote(x).result()

    def via_handle(model: str, app=handle) -> Callable[[np.ndarray], np.ndarray]:
        return _handle_call(app, model, in_name, out_name, no_cache, last)

    return {
        "direct": direct,
        "bare": via_bare,
        "bare_chain": via_chain,
        "handle": via_handle(model),
        "handle_nowait": via_handle(nowait),
        "handle_pool_deployment": via_handle(model, colo),
        "http": _http_call(http, model, in_name),
        "http_nowait": _http_call(http, nowait, in_name),
    }


def _start_apps(repo: Path, path: Path, threads: int, port: int) -> None:
    """Timeshare (CPU pool in the ingress, and as its own deployment), the bare deployment and
    the bare two-hop chain, on one Serve instance."""
    from ray import serve

    from router.app import build_app

    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(
        build_app({"repository": str(repo), "environment": "test"}), name=APP, route_prefix="/"
    )
    # The same app with the CPU pool as its own deployment (cpu_pool.placement=deployment,
    # the default when GPUs exist): two Serve hops instead of one for CPU-served models.
    serve.run(
        build_app({"repository": str(repo), "environment": "test",
                   "cpu_pool": {"placement": "deployment"}}),
        name=COLO_APP, route_prefix=None,
    )
    serve.run(_bare_deployment().bind(str(path), threads), name=BARE_APP, route_prefix=None)
    serve.run(_chain_app(str(path), threads), name=CHAIN_APP, route_prefix=None)


def _recorder(arms: dict[str, Callable[[np.ndarray], np.ndarray]], last: dict[str, Any],
              timed: dict[str, str]) -> tuple[Callable[[str, np.ndarray, bool], None],
                                              dict[str, list[float]],
                                              dict[str, list[tuple[float, float, float, float]]],
                                              dict[str, int]]:
    """``one(arm, x, record)`` for ``measure_rounds``: times one call, checks the answer against
    the direct forward and, for the arms in ``timed`` (arm -> the model whose timings it leaves
    in ``last``), keeps the response's timings; plus the samples, timings and mismatches it
    fills."""
    direct = arms["direct"]
    samples: dict[str, list[float]] = {k: [] for k in arms}
    timings: dict[str, list[tuple[float, float, float, float]]] = {k: [] for k in timed}
    mismatches = {k: 0 for k in arms}

    def one(arm: str, x: np.ndarray, record: bool) -> None:
        t = time.perf_counter()
        y = arms[arm](x)
        dt = time.perf_counter() - t
        if not np.allclose(y, direct(x), rtol=1e-4, atol=1e-5):
            mismatches[arm] += 1
        if record:
            samples[arm].append(dt)
            if arm in timings:
                tm = last[timed[arm]]
                timings[arm].append((dt * 1e3, tm.total_ms, tm.queue_ms, tm.compute_ms))

    return one, samples, timings, mismatches


def _repository(args: argparse.Namespace, tmp: Path) -> tuple[Path, str, Path, dict[str, Any]]:
    """The temporary repository (the model and its no-wait copy), the model's file and config."""
    source = (
        Path(args.repository) if args.repository else (DEMO_REPO if DEMO_REPO.is_dir() else None)
    )
    repo, nowait = _prepare_repository(tmp, args.model, source)
    path, cfg = _model_path(repo, args.model)
    return repo, nowait, path, cfg


def run(args: argparse.Namespace) -> dict[str, Any]:
    import httpx
    import ray
    from ray import serve

    from pool.service import cpu_threads_per_replica

    rng = np.random.default_rng(args.seed)
    random.seed(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="timeshare-overhead-"))
    repo, nowait, path, cfg = _repository(args, tmp)
    spec = cfg["inputs"][0]
    in_name, in_shape = spec["name"], [int(d) for d in spec["shape"]]
    out_name = cfg["outputs"][0]["name"]
    threads = cpu_threads_per_replica(1)

    # (a) direct, in the driver.
    torch.set_num_threads(threads)
    direct_model = torch.jit.load(str(path), map_location="cpu").eval()

    port = free_port()
    # Logical CPUs: each Serve replica holds one, and the four apps' replicas need more than
    # four (at 4 the second app never started). The machine's real cores are shared as before.
    ray.init(num_cpus=8, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    try:
        t0 = time.perf_counter()
        _start_apps(repo, path, threads, port)
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30.0)
        _wait_ready(http)
        startup_s = time.perf_counter() - t0
        last: dict[str, Any] = {}
        apps = {a: serve.get_app_handle(a) for a in (APP, COLO_APP, BARE_APP, CHAIN_APP)}
        arms = _arm_calls(apps, http, direct_model, in_name, out_name, args.model, nowait, last)
        one, samples, timings, mismatches = _recorder(
            arms, last, {"handle": args.model, "handle_nowait": nowait})

        def row() -> np.ndarray:
            return rng.standard_normal([1, *in_shape]).astype(np.float32)

        t_meas = time.perf_counter()
        rounds = measure_rounds(list(arms), one, row, args)
        measure_s = time.perf_counter() - t_meas
        http.close()
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)

    return overhead_report(args, cfg, threads, samples, timings, mismatches,
                           rounds=rounds, startup_s=startup_s, measure_s=measure_s)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="also write the JSON object to this file")
    p.add_argument("--n", type=int, default=500, help="measured calls per arm")
    p.add_argument("--warmup", type=int, default=30, help="warm-up calls per arm")
    p.add_argument("--rounds", type=int, default=10, help="rounds the measured calls are split in")
    p.add_argument("--model", default="iris-mlp1x16", help="demo model (TorchScript)")
    p.add_argument(
        "--repository",
        default=None,
        help="demo repository to copy the model from (default var/model_repository; "
        "built into a temp dir when missing)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.n < 1 or args.warmup < 0:
        p.error("--n must be >= 1 and --warmup >= 0")
    with stdout_to_stderr():
        result = run(args)
    emit(result, args.json)


if __name__ == "__main__":
    main()
