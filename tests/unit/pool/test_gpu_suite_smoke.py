"""The GPU suite's CPU smoke test: the whole suite runs (``--quick``) with Ray blocked from
import, every CUDA-only check skips with its reason, every other check passes, and nothing
beyond the GPU machine's packages and the documented wheel list is imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_suite._env import Env
from benchmarks.gpu_suite.targets import TARGETS, evaluate

ROOT = Path(__file__).resolve().parents[3]
CUDA_ONLY = {"host_tier_pinned", "copy_stream_event_no_device_sync", "stream_priorities",
             "nvml_vs_mem_get_info"}
# What the GPU machine has besides the standard library (nvidia-ml-py is imported as pynvml).
ON_DEVICE = {"torch", "numpy", "yaml", "safetensors", "pynvml"}

RUNNER = """
import importlib.abc, json, runpy, sys

class NoRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("ray is blocked: the GPU machine has no Ray")

sys.meta_path.insert(0, NoRay())
import numpy, safetensors, torch, yaml  # on the device already, with what they import
before = set(sys.modules)
sys.argv = ["gpu_suite", "--quick", "--device", "cpu", "--json", sys.argv[1]]
runpy.run_module("benchmarks.gpu_suite", run_name="__main__")
third = sorted({m.split(".")[0] for m in set(sys.modules) - before
                if "-packages" in (getattr(sys.modules[m], "__file__", None) or "")})
print("THIRD_PARTY=" + json.dumps(third), file=sys.stderr)
"""


def _wheel_modules() -> set[str]:
    lines = (ROOT / "benchmarks/gpu_suite/wheels.txt").read_text().splitlines()
    return {ln.split("==")[0].strip().replace("-", "_") for ln in lines
            if ln.strip() and not ln.startswith("#")}


def test_the_quick_suite_runs_ray_free_on_cpu_and_reports_every_check(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["benchmark"] == "gpu_suite" and r["cuda"] is False and r["quick"] is True
    assert r["ray_imported"] is False
    assert r["sections_with_errors"] == [], {k: v for k, v in r["sections"].items() if "error" in v}
    checks = r["sections"]["checks"]
    for name in CUDA_ONLY:
        assert checks[name]["status"] == "skipped" and "no CUDA" in checks[name]["reason"]
    for name in set(checks) - CUDA_ONLY:
        assert checks[name]["status"] == "pass", (name, checks[name])
    assert checks["no_leak_1000_swaps"]["swaps"] >= 1000
    loop = checks["serving_loop_no_sync"]
    assert loop["requests"] > 0 and loop["swaps"] > 0
    assert r["checks_passed"] is True and r["meets_targets"] is None
    assert r["targets_evaluated"] is False
    assert all(t["met"] is None for t in r["targets"].values())
    assert r["sections"]["pipelined"]["outputs_equal"] is True
    colo = r["sections"]["colocation"]
    assert colo["models"] >= 100 and colo["total_weight_bytes"] >= 3 * colo["device_budget_bytes"]
    assert set(colo["arms"]) == {"timeshare", "stock_multiplex", "host_ram_to_device",
                                 "host_ram_pinned"}
    assert all(a["requests"] == colo["requests"] > 0 for a in colo["arms"].values())
    assert colo["timeshare_p99_over_pinned"] is not None
    for zoo in r["sections"]["capacity"]["zoos"].values():  # both arms measured on each zoo
        assert zoo["curves"]["timeshare"] and zoo["curves"]["host_ram_pinned"]
        assert zoo["timeshare_capacity_per_s"] is not None
    swap = r["sections"]["swap"]
    assert "fixed_cost_us" in swap and len(swap["sizes"]) >= 2
    refs = r["sections"]["priority"]["references"]
    assert refs["floor"]["rt_requests"] > 0 and refs["streams_mixed"]["bg_rows_per_s"] > 0
    third = set(json.loads(proc.stderr.split("THIRD_PARTY=")[1].splitlines()[0]))
    assert third <= ON_DEVICE | _wheel_modules(), third - ON_DEVICE - _wheel_modules()


def _sections(**values: float) -> dict:
    """Sections holding ``values`` at each target's path, and one passing check."""
    out: dict = {"checks": {"c": {"status": "pass"}}}
    for name, value in values.items():
        *head, last = TARGETS[name][0]
        cur = out
        for p in head:
            cur = cur.setdefault(p, {})
        cur[last] = value
    return out


def test_targets_are_met_only_on_cuda_with_every_bound_and_no_failed_check():
    good = {"swap_1gb_over_raw_pinned": 0.95, "swap_1gb_gbps": 24.0,
            "pipelined_first_layer_ready_ms_1gb": 3.0, "realtime_p99_vs_alone": 1.1,
            "colocation_stock_p99_over_timeshare": 12.0,
            "colocation_host_ram_p99_over_timeshare": 4.0,
            "background_kept_vs_unchunked_alone": 0.95, "realtime_p50_alone_over_floor": 1.5,
            "swap_1mb_over_raw_pinned": 0.6, "swap_10mb_over_raw_pinned": 0.85,
            "capacity_over_pinned_min": 2.0, "goodput_at_2x_over_capacity_min": 0.95,
            "colocation_p99_over_pinned": 0.4}
    assert set(good) == set(TARGETS)  # every target is exercised here
    cuda, cpu = Env("cuda"), Env("cpu")
    assert evaluate(cuda, _sections(**good))["meets_targets"] is True
    assert evaluate(cpu, _sections(**good))["meets_targets"] is None
    slow = evaluate(cuda, _sections(**{**good, "swap_1gb_gbps": 12.0}))
    assert slow["meets_targets"] is False and slow["targets"]["swap_1gb_gbps"]["met"] is False
    collapsed = evaluate(cuda, _sections(**{**good, "goodput_at_2x_over_capacity_min": 0.3}))
    assert collapsed["meets_targets"] is False
    assert collapsed["targets"]["goodput_at_2x_over_capacity_min"]["met"] is False
    failed = _sections(**good)
    failed["checks"]["c"] = {"status": "fail"}
    assert evaluate(cuda, failed)["meets_targets"] is False
    missing = _sections(**{k: v for k, v in good.items() if k != "realtime_p99_vs_alone"})
    assert evaluate(cuda, missing)["meets_targets"] is False
