"""Priority on the device: realtime p99 with saturating background work vs realtime alone, and
vs FIFO. Runs ``benchmarks.priority`` (Ray-free, in-process ``DeviceWorker``) on the suite's
device; on CUDA the background model is widened so its batches keep the GPU busy, and the
worker runs them whole (its CUDA default: stream priorities preempt). Then the references a
capable user writes (``references``: the realtime model's plain-torch floor, and plain stream
priorities with background unchunked), and the worker's figures as ratios of them."""

from __future__ import annotations

from benchmarks import priority as prio
from benchmarks.gpu_suite._env import Env, log
from benchmarks.gpu_suite.references import run_references

__all__ = ["run_priority"]


def _argv(env: Env) -> list[str]:
    if env.cuda:
        return ["--device", "cuda", "--seconds", "3", "--rounds", "2", "--rt-rate", "100",
                "--bg-clients", "4", "--bg-rows", "8192", "--chunk", "8192",
                "--bg-hidden", "2048", "--bg-depth", "4"]
    if env.quick:
        return ["--seconds", "0.5", "--rounds", "1", "--rt-rate", "40", "--bg-clients", "2",
                "--bg-rows", "256"]
    return ["--seconds", "1.5", "--rounds", "2"]


async def run_priority(env: Env) -> dict:
    argv = _argv(env)
    log(f"priority: {' '.join(argv)}")
    args = prio.parser().parse_args(argv)
    res = await prio.run(args)
    res.pop("benchmark", None)
    # the suite's own target replaces the stand-alone benchmark's (1.2x alone, GPU only)
    res["standalone_meets_targets"] = res.pop("meets_targets")
    res.pop("targets", None)
    res["argv"] = argv
    log("priority: references (plain-torch floor, stream priorities)")
    refs = await run_references(env, args)
    res["references"] = refs
    floor, streams_bg = refs["floor"], refs["streams_background_alone"]
    res["rt_p50_alone_over_floor"] = _ratio(res["realtime_alone"]["rt_p50_ms"],
                                            floor.get("rt_p50_ms"))
    res["rt_p99_alone_over_floor"] = _ratio(res["realtime_alone"]["rt_p99_ms"],
                                            floor.get("rt_p99_ms"))
    res["bg_mixed_over_streams_bg_alone"] = _ratio(res["priority_mixed"]["bg_rows_per_s"],
                                                   streams_bg.get("bg_rows_per_s"))
    return res


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None
