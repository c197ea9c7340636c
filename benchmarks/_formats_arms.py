"""The arms of ``benchmarks.formats`` that need fresh processes.

    python -m benchmarks._formats_arms compile ROOT CACHE ROUNDS COMPILED
    python -m benchmarks._formats_arms replica MODEL_DIR STATE_DIR SECONDS START_AT PIN

``compile``: load the safetensors digits-large (``compile: {mode: default}`` when COMPILED=1)
with Inductor's cache in CACHE, time load + first forward (a cold replica's first answer, the
compilation included), then the steady p50. ``replica``: one CPU-pool replica's worth of work
(its threads pinned to its share of the cores when PIN=1, else cores/replicas threads
unpinned) serving batch-64 forwards from START_AT for SECONDS. Each prints one JSON line.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["affinity_arm", "parse_probe"]


def parse_probe(stdout: str) -> dict[str, Any]:
    """The JSON line a probe process printed last."""
    return json.loads(stdout.strip().splitlines()[-1])


def _compile(root: str, cache: str, rounds: str, compiled: str) -> dict[str, Any]:
    from pool._private.compile_cache import configure_compile_cache

    configure_compile_cache(cache)
    import torch

    from pool._private.weights import pack
    from pool.config import CompileConfig
    from pool.loader import load_module
    from pool.repository import read_config

    config = read_config(Path(root) / "safetensors")
    if compiled == "1":
        config = config.model_copy(update={"compile": CompileConfig()})
    x1, x64 = torch.rand(1, 64) * 16, torch.rand(64, 64) * 16
    with torch.inference_mode():
        t0 = time.perf_counter()
        module = load_module(Path(root) / "safetensors" / "1", config)
        pack(module)
        module(x64)
        first = time.perf_counter() - t0
        module(x1)  # the warm-up's other size
        out = {"first_request_ms": round(first * 1e3, 2)}
        for name, x in (("p50_ms_b1", x1), ("p50_ms_b64", x64)):
            times = []
            for _ in range(int(rounds)):
                t = time.perf_counter()
                module(x)
                times.append(time.perf_counter() - t)
            out[name] = round(statistics.median(times) * 1e3, 4)
    return out


def _replica(model_dir: str, state_dir: str, seconds: str, start_at: str, pin: str
             ) -> dict[str, Any]:
    import torch

    from pool._private.cpu_affinity import pin_replica
    from pool.loader import load_module
    from pool.repository import read_config
    from pool.service import cpu_threads_per_replica

    pinning = pin_replica(state_dir, 2, mode="on") if pin == "1" else None
    torch.set_num_threads(len(pinning.cpus) if pinning else cpu_threads_per_replica(2))
    module = load_module(Path(model_dir) / "1", read_config(Path(model_dir)))
    x = torch.rand(64, 64) * 16
    times = []
    with torch.inference_mode():
        for _ in range(5):
            module(x)
        while time.time() < float(start_at):
            time.sleep(0.005)
        end = time.time() + float(seconds)
        while time.time() < end:
            t = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - t)
    return {"count": len(times), "p50_ms": round(statistics.median(times) * 1e3, 4),
            "pinned_cpus": sorted(pinning.cpus) if pinning else None}


def _affinity_once(model_dir: Path, seconds: float, pin: bool) -> dict[str, Any]:
    state = tempfile.mkdtemp(prefix="ts-affinity-")
    start_at = time.time() + 4.0  # both replicas loaded and warm by then
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks._formats_arms", "replica",
                               str(model_dir), state, str(seconds), str(start_at),
                               "1" if pin else "0"], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [parse_probe(p.communicate(timeout=120 + seconds)[0]) for p in procs]
    return {"rows_per_s": sum(o["count"] for o in outs) * 64 / seconds,
            "p50_ms": statistics.median(o["p50_ms"] for o in outs),
            "pinned_cpus": [o["pinned_cpus"] for o in outs]}


def affinity_arm(model_dir: Path, *, seconds: float, rounds: int = 2) -> dict[str, Any]:
    """2 replicas, pinned vs not, alternated ``rounds`` times (noise from other load)."""
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for _ in range(rounds):
        for arm in ("off", "on"):
            runs[arm].append(_affinity_once(model_dir, seconds, arm == "on"))
    out: dict[str, Any] = {"replicas": 2, "batch": 64, "seconds_per_run": seconds,
                           "runs_per_arm": rounds}
    for arm, rs in runs.items():
        out[arm] = {"rows_per_s": round(statistics.mean(r["rows_per_s"] for r in rs), 1),
                    "p50_ms": round(statistics.mean(r["p50_ms"] for r in rs), 4),
                    "pinned_cpus": rs[0]["pinned_cpus"]}
    out["throughput_ratio_on_vs_off"] = round(out["on"]["rows_per_s"] /
                                              out["off"]["rows_per_s"], 3)
    out["p50_ratio_on_vs_off"] = round(out["on"]["p50_ms"] / out["off"]["p50_ms"], 3)
    return out


if __name__ == "__main__":
    kind, *rest = sys.argv[1:]
    print(json.dumps(_compile(*rest) if kind == "compile" else _replica(*rest)))
