"""The measuring loop and the report of ``benchmarks.serving_overhead``: shuffled rounds over
the arms, then each arm's latency, its ratio to the direct call and the target keys."""

from __future__ import annotations

import argparse
import os
import platform
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["TARGET_MS", "measure_rounds", "overhead_report"]

TARGET_MS = 3.0


def measure_rounds(arms: list[str], one: Callable[[str, np.ndarray, bool], None],
                   row: Callable[[], np.ndarray], args: argparse.Namespace) -> int:
    """Warm every arm up, then run ``args.n`` calls per arm in ``args.rounds`` rounds, the arms
    in a shuffled order each round (machine noise falls on all arms alike); the rounds run."""
    for arm in arms:  # warm-up: router/proxy connections, model residency, JIT profiling
        for _ in range(args.warmup):
            one(arm, row(), False)
    rounds = max(1, args.rounds)
    per_round = [args.n // rounds + (1 if i < args.n % rounds else 0) for i in range(rounds)]
    for k in per_round:
        order = list(arms)
        random.shuffle(order)
        for arm in order:
            for _ in range(k):
                one(arm, row(), True)
    return rounds


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1e3
    return {"p50_ms": round(float(np.percentile(ms, 50)), 4),
            "p99_ms": round(float(np.percentile(ms, 99)), 4),
            "mean_ms": round(float(ms.mean()), 4), "n": int(ms.size)}


def _key(stats: dict[str, dict[str, float]], arm: str) -> dict[str, Any]:
    """The target for one handle arm: what it adds at p50 over the bare deployment."""

    def p50(arm: str) -> float:
        return stats[arm]["p50_ms"]

    gap = round(p50(arm) - p50("bare"), 4)
    return {
        "arm": arm,
        "handle_minus_bare_p50_ms": gap,
        "target_ms": TARGET_MS,
        "target_met": bool(gap <= TARGET_MS),
        "http_minus_bare_p50_ms": (
            round(p50(arm.replace("handle", "http")) - p50("bare"), 4)
            if arm.replace("handle", "http") in stats else None),
        # What the second Serve hop costs by itself, and what Timeshare adds beyond it.
        "second_hop_p50_ms": round(p50("bare_chain") - p50("bare"), 4),
        "handle_minus_bare_chain_p50_ms": round(p50(arm) - p50("bare_chain"), 4),
    }


def _breakdown(timings: list[tuple]) -> dict[str, float]:
    """Medians of one arm's (round trip, ingress total, queue, compute) timings."""
    a = np.asarray(timings)
    med = np.median(a, axis=0)
    return {
        "round_trip_ms": round(float(med[0]), 4),
        "ingress_total_ms": round(float(med[1]), 4),
        "queue_ms": round(float(med[2]), 4),
        "compute_ms": round(float(med[3]), 4),
        "transport_ms": round(float(np.median(a[:, 0] - a[:, 1])), 4),
        "ingress_minus_queue_compute_ms": round(
            float(np.median(a[:, 1] - a[:, 2] - a[:, 3])), 4
        ),
    }


def _machine() -> dict[str, Any]:
    import ray

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ray": ray.__version__,
        "platform": platform.platform(),
    }


def overhead_report(args: argparse.Namespace, cfg: dict[str, Any], threads: int,
                    samples: dict[str, list[float]], timings: dict[str, list[tuple]],
                    mismatches: dict[str, int], *, rounds: int, startup_s: float,
                    measure_s: float) -> dict[str, Any]:
    """The benchmark's JSON object."""
    stats = {k: _stats(v) for k, v in samples.items()}
    d50, d99 = stats["direct"]["p50_ms"], stats["direct"]["p99_ms"]
    ratios = {
        k: {"p50": round(s["p50_ms"] / d50, 2), "p99": round(s["p99_ms"] / d99, 2)}
        for k, s in stats.items()
        if k != "direct"
    }
    return {
        "benchmark": "serving_overhead",
        "model": args.model,
        "batch_wait_ms": float(cfg.get("batch_wait_ms", 2.0)),
        "rows_per_call": 1,
        "n_per_arm": args.n,
        "warmup_per_arm": args.warmup,
        "rounds": rounds,
        "torch_threads": threads,
        "arms": stats,
        "ratio_vs_direct": ratios,
        "key": _key(stats, "handle"),
        "key_nowait": _key(stats, "handle_nowait"),
        "key_pool_deployment": _key(stats, "handle_pool_deployment"),
        # The pool holds a lone request up to batch_wait_ms hoping to fill a batch.
        "batching_wait_p50_ms": round(
            stats["handle"]["p50_ms"] - stats["handle_nowait"]["p50_ms"], 4),
        "breakdown": {"handle": _breakdown(timings["handle"]),
                      "handle_nowait": _breakdown(timings["handle_nowait"])},
        "output_mismatches": mismatches,
        "startup_s": round(startup_s, 2),
        "measure_s": round(measure_s, 2),
        "machine": _machine(),
    }
