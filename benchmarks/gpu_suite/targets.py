"""The suite's targets (issues 17 and 41), evaluated only where CUDA ran; checks must all pass
there."""

from __future__ import annotations

from typing import Any

from benchmarks.gpu_suite._env import Env

__all__ = ["evaluate"]


def _get(sections: dict, *path: str) -> Any:
    cur: Any = sections
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur if isinstance(cur, (int, float)) and not isinstance(cur, bool) else None


# name -> (path to the value, "min" or "max", bound, where the bound comes from)
TARGETS = {
    "swap_1gb_over_raw_pinned": (("swap", "sizes", "1GB", "swap_over_raw"), "min", 0.9,
                                 "swap-in >= 0.9x a raw pinned copy of the same bytes"),
    "swap_1gb_gbps": (("swap", "sizes", "1GB", "swap_in_gbps"), "min", 20.0,
                      "ServerlessLLM's loader: ~23 GB/s on this hardware class"),
    "pipelined_first_layer_ready_ms_1gb": (("pipelined", "first_layer_ready_ms"), "max", 5.0,
                                           "PipeSwitch: 3.6-6.6 ms task startup"),
    "realtime_p99_vs_alone": (("priority", "rt_p99_vs_alone"), "max", 1.2,
                              "REEF: < 2 % overhead at kernel level"),
    "background_kept_vs_unchunked_alone": (("priority", "bg_mixed_over_unchunked_alone"), "min",
                                           0.9, "stream priorities kept 99.6 % (H200)"),
    "realtime_p50_alone_over_floor": (("priority", "rt_p50_alone_over_floor"), "max", 2.0,
                                      "within 2x a plain torch call on an urgent stream"),
    "swap_1mb_over_raw_pinned": (("swap", "sizes", "1MB", "swap_over_raw"), "min", 0.5,
                                 "a small swap costs at most its copy again"),
    "swap_10mb_over_raw_pinned": (("swap", "sizes", "10MB", "swap_over_raw"), "min", 0.8,
                                  "fixed cost per swap amortised by 10 MiB"),
    "capacity_over_pinned_min": (("capacity", "min_capacity_over_pinned"), "min", 1.5,
                                 "every zoo: 1.5x the hand-written pinned-LRU loop's capacity"),
    "goodput_at_2x_over_capacity_min": (("capacity", "min_goodput_at_2x_over_capacity"), "min",
                                        0.9, "past saturation goodput holds near capacity"),
    "colocation_p99_over_pinned": (("colocation", "timeshare_p99_over_pinned"), "max", 0.5,
                                   "p99 at 400 req/s <= half the pinned-LRU loop's"),
    "colocation_stock_p99_over_timeshare": (("colocation", "stock_p99_over_timeshare"), "min",
                                            10.0, "p99 <= 1/10 of stock multiplexing"),
    "colocation_host_ram_p99_over_timeshare": (("colocation", "host_ram_p99_over_timeshare"),
                                               "min", 3.0, "p99 <= 1/3 of host-RAM .to()"),
}


def evaluate(env: Env, sections: dict) -> dict:
    checks = sections.get("checks", {})
    failed = sorted(n for n, c in checks.items() if isinstance(c, dict)
                    and c.get("status") == "fail")
    errors = sorted(n for n, s in sections.items() if isinstance(s, dict) and "error" in s)
    targets = {}
    for name, (path, kind, bound, why) in TARGETS.items():
        value = _get(sections, *path)
        # On the CPU stand-in the sizes are scaled down and the device is no GPU: not evaluated.
        met = None if value is None or not env.cuda else (
            value >= bound if kind == "min" else value <= bound)
        targets[name] = {"value": value, kind: bound, "met": met, "why": why}
    if env.cuda:
        meets: bool | None = (not failed and not errors
                              and all(t["met"] is True for t in targets.values()))
    else:
        meets = None
    return {"checks_failed": failed, "sections_with_errors": errors,
            "checks_passed": not failed and "checks" in sections,
            "targets": targets, "targets_evaluated": env.cuda, "meets_targets": meets}
