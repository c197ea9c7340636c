"""Placement across pool replicas: Timeshare's placement-aware router vs Ray Serve's default.

    python -m benchmarks.placement --json out.json [--quick] [--rate 60] [--seconds 30]

``--models`` TorchScript encoders (``benchmarks._zoo``, 13.7 MB each) are written to a temporary
model repository. Two replicas of the real ``pool.deployments.PoolDeployment`` (CPU stand-in,
one torch thread each) each get a device budget of ``--budget-share`` of the zoo's weights.
Requests arrive open-loop (Poisson, ``--rate``/s) with a deadline; the model is drawn by
Zipf(1.1) popularity, and at half time one unpopular model (rank ``--hot-rank``) turns hot and
takes ``--hot-share`` of all requests. Arms, each deployed fresh over the same repository, with
the same replicas, budgets, warm-up and arrival sequence:

- ``ray_default`` (the baseline): the pool deployment with Ray Serve's default request router
  (power of two choices on queue length, no notion of models). This is the fair baseline
  because it is what a user gets running the same pool code on the same two replicas without
  Timeshare's router: it isolates placement. Stock ``@serve.multiplexed`` would also change how a
  miss is paid (a disk reload instead of a host-tier copy); ``benchmarks.colocation`` measures
  that separately.
- ``timeshare_placement``: ``TimeshareRequestRouter`` with its placement plan
  (``policies.placement``: a cold model on one replica, a hot one on ``ceil(load/share)``).
- ``timeshare_ranking_only`` (reported, not a target): the same router with the plan off
  (resident first, then shortest wait), to show what the plan adds beyond residency.

Reports per arm p50/p99 over all requests (a refusal counts at its latency), goodput (answers
within the deadline per second), swaps per request (swap-ins on both replicas over requests),
the hot phase's p99, and on how many replicas the hot model ended resident; ratios placement /
default. Targets: goodput >= 1.3x, p99 <= 0.7x.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._output import emit, stdout_to_stderr
from benchmarks._placement_diag import Row, breakdown
from benchmarks._zoo import ARCHS, build_repo
from benchmarks.colocation import _pct, zipf_weights

ARMS = ("ray_default", "timeshare_placement", "timeshare_ranking_only")


def _app(arm: str, repo: str, state_dir: str, budget: int, host_budget: int | None, args):
    from ray.serve.config import RequestRouterConfig

    from pool.deployments import PoolDeployment

    options: dict = {"name": "Pool", "num_replicas": 2, "max_ongoing_requests": 512,
                     "ray_actor_options": {"num_cpus": 0},
                     "logging_config": {"enable_access_log": False}}
    if arm != "ray_default":
        options["request_router_config"] = RequestRouterConfig(
            request_router_class="pool.request_router:TimeshareRequestRouter",  # type: ignore[arg-type]
            request_router_kwargs={"placement": arm == "timeshare_placement",
                                   "capacity_share": args.capacity_share},
            request_routing_stats_period_s=0.5)  # type: ignore[arg-type]
    return PoolDeployment.options(**options).bind(  # type: ignore[attr-defined]
        pool="gpu", repository=repo, state_dir=state_dir,
        device={"kind": "cpu", "memory_budget_bytes": budget, "threads": 1,
                "host_budget_bytes": host_budget},
        poll_interval_s=5.0)


def _arrivals(names: list[str], args) -> list[tuple[float, str]]:
    """The one arrival sequence every arm replays: (offset s, model)."""
    rng = random.Random(11)
    weights = zipf_weights(len(names))
    hot = names[args.hot_rank]
    out: list[tuple[float, str]] = []
    t = 0.0
    while True:
        t += rng.expovariate(args.rate)
        if t >= args.seconds:
            return out
        if t >= args.seconds / 2 and rng.random() < args.hot_share:
            out.append((t, hot))
        else:
            out.append((t, rng.choices(names, weights)[0]))


async def _replica_stats(app_name: str) -> list[dict]:
    """Every replica's published routing stats, read from the replica actors themselves."""
    import ray

    actors = [a for a in ray.util.list_named_actors(all_namespaces=True)
              if a["name"].startswith(f"SERVE_REPLICA::{app_name}#")]
    return [await ray.get_actor(a["name"], namespace=a["namespace"]).record_routing_stats.remote()
            for a in actors]


def _row(offset: float, latency: float, name: str, reply) -> Row:
    from pool.work import PoolRefusal

    if isinstance(reply, PoolRefusal):
        return Row(offset, latency, reply.kind, name)
    return Row(offset, latency, "ok", name, reply.queue_ms, reply.swap_ms, reply.compute_ms,
               reply.device)


async def _drive(call, arrivals, args) -> tuple[list[Row], float]:
    """Replays ``arrivals`` open-loop; one ``Row`` per request, wall time."""
    deadline_s = args.deadline_ms / 1e3
    x = ARCHS["encoder"].sample(np.random.default_rng(0))
    rows: list[Row] = []

    async def one(offset: float, name: str) -> None:
        t0 = time.perf_counter()
        try:
            reply = await asyncio.wait_for(call(name, x, deadline_s), args.client_timeout_s)
        except asyncio.TimeoutError:
            rows.append(Row(offset, time.perf_counter() - t0, "timeout", name))
            return
        except Exception:  # noqa: BLE001 - any other failure: a miss
            rows.append(Row(offset, time.perf_counter() - t0, "error", name))
            return
        rows.append(_row(offset, time.perf_counter() - t0, name, reply))

    start = time.perf_counter()
    tasks = []
    for offset, name in arrivals:
        await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
        tasks.append(asyncio.create_task(one(offset, name)))
    await asyncio.gather(*tasks)
    return rows, time.perf_counter() - start


async def _arm(arm: str, repo: str, state_dir: str, budget: int, names, k: int, args) -> dict:
    from ray import serve

    from policies.priority import Priority
    from pool.work import PoolWork, unwrap

    app_name = f"placement_{arm}"
    host = int(budget / args.budget_share * args.host_share) if args.host_share < 1 else None
    handle = serve.run(_app(arm, repo, state_dir, budget, host, args), name=app_name,
                       route_prefix=None)
    for _ in range(120):  # both replicas must have scanned the repository
        stats = await _replica_stats(app_name)
        await handle.sync_now.remote()
        if len(stats) == 2 and len(await handle.index.remote()) >= len(names):
            break
        await asyncio.sleep(0.5)

    async def call(name, x, deadline_s):
        now = time.time()  # the routing id in the call's metadata is what the router reads
        work = PoolWork(name, None, {"tokens": x}, Priority.INTERACTIVE,
                        deadline_at=now + deadline_s, arrived_at=now)
        return await handle.infer.options(multiplexed_model_id=work.routing_id).remote(work)

    x = ARCHS["encoder"].sample(np.random.default_rng(0))
    for name in reversed(names[:2 * k]):  # warm: the 2K most popular, as each router places them
        unwrap(await call(name, x, 60.0))
    await asyncio.sleep(1.0)  # a stats period, so the routers start from published residency
    before = sum(s["swaps"] for s in await _replica_stats(app_name))
    rows, wall = await _drive(call, _arrivals(names, args), args)
    after = await _replica_stats(app_name)
    serve.delete(app_name)
    hot = names[args.hot_rank]
    return _summary(rows, wall, args, sum(s["swaps"] for s in after) - before, hot,
                    sum(any(k.split("@")[0] == hot for k in s["resident"]) for s in after))


async def _all_arms(repo: str, state: Path, budget: int, names, k: int, args) -> dict:
    return {arm: await _arm(arm, repo, str(state / arm), budget, names, k, args) for arm in ARMS}


def _summary(rows: list[Row], wall: float, args, swaps: int, hot: str, hot_resident_on: int
             ) -> dict:
    deadline_s = args.deadline_ms / 1e3
    lat = [r.latency_s for r in rows]
    hot_lat = [r.latency_s for r in rows if r.offset_s >= args.seconds / 2]
    good = sum(1 for r in rows if r.outcome == "ok" and r.latency_s <= deadline_s)
    return {"requests": len(rows), "answered": sum(1 for r in rows if r.outcome == "ok"),
            "within_deadline": good, "goodput_per_s": round(good / args.seconds, 2),
            "p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "hot_phase_p99_ms": _pct(hot_lat, 99),
            "swaps": swaps, "swaps_per_request": round(swaps / max(len(rows), 1), 4),
            "hot_model_resident_on_replicas": hot_resident_on, "wall_s": round(wall, 1),
            "missed_by_phase": breakdown(rows, deadline_s=deadline_s, half_s=args.seconds / 2,
                                         hot=hot)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the JSON object to this file")
    ap.add_argument("--quick", action="store_true", help="smoke test: 8 s per arm, 40 models")
    ap.add_argument("--models", type=int, default=40)
    ap.add_argument("--rate", type=float, default=60.0, help="requests per second (Poisson)")
    ap.add_argument("--seconds", type=float, default=30.0, help="load duration per arm")
    ap.add_argument("--budget-share", type=float, default=0.125,
                    help="each replica's device budget as a share of the zoo's weights")
    ap.add_argument("--host-share", type=float, default=0.5,
                    help="each replica's host tier (weights in host memory; beyond it LRU back "
                         "to disk, a reload) as a share of the zoo's weights; 1: unbounded")
    ap.add_argument("--hot-rank", type=int, default=30,
                    help="Zipf rank (0 = most popular) of the model that turns hot at half time")
    ap.add_argument("--hot-share", type=float, default=0.5,
                    help="share of all requests the hot model takes in the second half")
    ap.add_argument("--capacity-share", type=float, default=0.5,
                    help="placement: a replica's device time one model may take before it is "
                         "spread (request_router_kwargs capacity_share)")
    ap.add_argument("--deadline-ms", type=float, default=250.0)
    ap.add_argument("--client-timeout-s", type=float, default=5.0)
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds = 8.0
    if args.models < 40 or not 0 <= args.hot_rank < args.models:
        ap.error(f"--models must be >= 40 and --hot-rank in [0, models), got {args.models}, "
                 f"{args.hot_rank}")
    if (not args.budget_share < args.host_share <= 1 or not 0 < args.budget_share <= 0.5
            or not 0 <= args.hot_share < 1 or args.rate <= 0):
        ap.error("--budget-share in (0, 0.5] and below --host-share (<= 1), --hot-share in "
                 "[0, 1), --rate > 0")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = _parse(argv)
    import ray
    from ray import serve

    with stdout_to_stderr(), tempfile.TemporaryDirectory(prefix="timeshare-placement-") as tmp:
        repo, state = Path(tmp) / "repo", Path(tmp) / "state"
        repo.mkdir()
        model_bytes = build_repo(repo, args.models, "encoder")
        names = [f"m{i:02d}" for i in range(args.models)]
        budget = int(args.models * model_bytes * args.budget_share)
        k = max(1, budget // model_bytes)
        root = str(Path(__file__).resolve().parents[1])
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"PYTHONPATH": root}})
        try:
            arms = asyncio.run(_all_arms(str(repo), state, budget, names, k, args))
        finally:
            serve.shutdown()
            ray.shutdown()
    base, ts = arms["ray_default"], arms["timeshare_placement"]
    goodput_ratio = _ratio(ts["goodput_per_s"], base["goodput_per_s"])
    p99_ratio = _ratio(ts["p99_ms"], base["p99_ms"])
    out = {
        "benchmark": "placement", "quick": args.quick, "models": args.models, "zipf_s": 1.1,
        "replicas": 2, "model_bytes": model_bytes, "device_budget_bytes_per_replica": budget,
        "models_per_replica": k, "rate_per_s": args.rate, "seconds_per_arm": args.seconds,
        "hot_model": names[args.hot_rank], "hot_share_second_half": args.hot_share,
        "capacity_share": args.capacity_share, "host_share_per_replica": args.host_share,
        "deadline_ms": args.deadline_ms,
        "baseline": "ray_default", "arms": arms,
        "goodput_ratio_placement_over_default": goodput_ratio,
        "p99_ratio_placement_over_default": p99_ratio,
        "hot_phase_p99_ratio_placement_over_default":
            _ratio(ts["hot_phase_p99_ms"], base["hot_phase_p99_ms"]),
        "swaps_per_request_ratio_placement_over_default":
            _ratio(ts["swaps_per_request"], base["swaps_per_request"]),
        "targets": {"goodput_ratio_min": 1.3, "p99_ratio_max": 0.7},
        "meets_targets": bool(goodput_ratio is not None and goodput_ratio >= 1.3
                              and p99_ratio is not None and p99_ratio <= 0.7),
    }
    return emit(out, args.json)


if __name__ == "__main__":
    main()
