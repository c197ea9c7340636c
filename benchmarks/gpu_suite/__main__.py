"""Run the GPU suite: ``python -m benchmarks.gpu_suite [--json OUT] [--quick] [--device D]``.

Prints one JSON object (also written to ``--json``): each section's figures, each check's
pass/fail/skipped with its reason, the targets with their values, and ``meets_targets``
(true/false where CUDA ran, null on the CPU stand-in, whose figures are no GPU evidence).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Awaitable, Callable

import torch

from benchmarks._output import emit
from benchmarks.gpu_suite._env import Env, log
from benchmarks.gpu_suite.capacity import run_capacity
from benchmarks.gpu_suite.checks import run_checks
from benchmarks.gpu_suite.colocation import run_colocation
from benchmarks.gpu_suite.pipelined import run_pipelined
from benchmarks.gpu_suite.priority import run_priority
from benchmarks.gpu_suite.swap import run_swap
from benchmarks.gpu_suite.targets import evaluate

Section = Callable[[Env], Awaitable[dict]]
# name -> (runner, budget in seconds on an H100; they sum to 7.8 minutes; the H200 run of
# 2026-11-27 took 8, 19, 8, 35 and 78 s for the first five). A section may overrun its budget
# by half while the sections after it still get theirs inside TOTAL_S, so the whole suite ends
# within 8 minutes (one 10-minute device call, with the wheel install).
TOTAL_S = 480.0
SECTIONS: dict[str, tuple[Section, float]] = {
    "checks": (run_checks, 40),
    "swap": (run_swap, 50),
    "pipelined": (run_pipelined, 30),
    "priority": (run_priority, 60),
    "colocation": (run_colocation, 100),
    "capacity": (run_capacity, 190),
}


def cut_off_s(budget: float, elapsed: float, later: float) -> float:
    """Seconds a section may run: up to 1.5x its budget, less what the later sections'
    budgets need of what is left of TOTAL_S, and never under its own budget."""
    return max(budget, min(1.5 * budget, TOTAL_S - elapsed - later))


async def run(env: Env, only: list[str]) -> dict:
    sections: dict[str, dict] = {}
    seconds: dict[str, float] = {}
    chosen = [(n, fn, b) for n, (fn, b) in SECTIONS.items() if n in only]
    start = time.perf_counter()
    for i, (name, fn, budget) in enumerate(chosen):
        limit = cut_off_s(budget, time.perf_counter() - start, sum(b for *_, b in chosen[i + 1:]))
        log(f"section {name} (budget {budget:.0f} s, cut off at {limit:.0f} s)")
        t0 = time.perf_counter()
        try:
            sections[name] = await asyncio.wait_for(fn(env), timeout=limit)
        except asyncio.TimeoutError:
            sections[name] = {"error": f"cut off after {limit:.0f} s"}
        except Exception as e:  # noqa: BLE001 - one broken section never hides the others
            sections[name] = {"error": f"{type(e).__name__}: {e}"}
        seconds[name] = round(time.perf_counter() - t0, 2)
        env.free_cache()
    return {"sections": sections, "section_seconds": seconds,
            "section_budgets_s": {n: b for n, (_, b) in SECTIONS.items() if n in only}}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="also write the JSON object to this file")
    ap.add_argument("--quick", action="store_true",
                    help="CPU only: shrink every section further (the CI smoke test)")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})")
    args = ap.parse_args(argv)
    kind = args.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False")
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        ap.error(f"--only: unknown sections {unknown}; valid: {', '.join(SECTIONS)}")
    env = Env(kind, quick=args.quick and kind == "cpu")
    t0 = time.perf_counter()
    body = asyncio.run(run(env, only))
    out = {
        "benchmark": "gpu_suite",
        "device": env.name,
        "cuda": env.cuda,
        "quick": env.quick,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "python": platform.python_version(),
        "ray_imported": "ray" in sys.modules,
        "pydantic_imported": "pydantic" in sys.modules,
        **body,
        **evaluate(env, body["sections"]),
        "elapsed_s": round(time.perf_counter() - t0, 2),
    }
    return emit(out, args.json)


if __name__ == "__main__":
    main()
