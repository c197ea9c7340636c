"""Model formats, compile and CPU affinity, for the same model (digits-large) on this machine.

    python -m benchmarks.formats --json out.json [--quick] [--repo var/model_repository]

1. **Formats.** digits-large (the demo's DigitsCNN, 32 channels; its trained weights when
   ``--repo`` holds them, else seeded ones, said in ``weights``) written by each format's own
   exporter: TorchScript, safetensors, ``torch.export`` (``model.pt2``), ONNX. Per format:
   ``load_ms`` (disk -> module -> packed host buffer, what a pool does before warm-up),
   ``swap_in_ms`` (host tier -> device arena through ``Residency.ensure`` with room for one
   model, so every swap-in evicts the other copy), ``p50_forward_ms`` at batch 1 and 64 on the
   swapped-in copy, and the largest output difference from the torch model.
2. **Compile.** The same model with ``compile: {mode: default}`` vs without: first request after
   load (compilation included) and steady p50, each in a fresh process; then once more with the
   Inductor cache the first run left (a restart): ``warm_start_first_request_ms``.
3. **CPU affinity.** Two replica processes serving digits-large at batch 64 at once for a fixed
   time, their threads pinned to disjoint physical cores (``pool._private.cpu_affinity``) vs
   not pinned; throughput and p50 as ratios (on / off).

``--quick`` (smoke test): fewer rounds, no compile arm (a cold compile takes about a minute
here). Needs torch and onnxruntime, not Ray. Prints one JSON object, also written to ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks._formats_arms import affinity_arm, parse_probe
from benchmarks._output import emit
from deploy.demo_formats import save_exported, save_onnx
from deploy.demo_models import digits_cnn
from policies.priority import Priority
from pool._private.residency import Residency
from pool._private.weights import pack
from pool.device import DeviceSpec
from pool.loader import load_module
from pool.repository import read_config

FORMATS = ("torchscript", "safetensors", "torch_export", "onnx")
MODEL = "digits-large"


def source_model(repo: Path) -> tuple[torch.nn.Module, str]:
    """digits-large's trained weights when the repository has them, else seeded ones."""
    module = digits_cnn(32).eval()
    archive = repo / MODEL / "1" / "model.pt"
    if archive.is_file():
        module.load_state_dict(torch.jit.load(str(archive), map_location="cpu").state_dict())
        return module, f"trained ({archive})"
    torch.manual_seed(0)
    return digits_cnn(32).eval(), "seeded (no demo repository)"


def write_formats(module: torch.nn.Module, root: Path) -> None:
    import yaml
    from safetensors.torch import save_file

    example = torch.zeros(2, 64)
    for fmt in FORMATS:
        vdir = root / fmt / "1"
        vdir.mkdir(parents=True)
        cfg: dict[str, Any] = {
            "name": fmt, "format": fmt, "max_batch_size": 64,
            "inputs": [{"name": "pixels", "dtype": "FP32", "shape": [64]}],
            "outputs": [{"name": "logits", "dtype": "FP32", "shape": [10]}]}
        if fmt == "safetensors":
            cfg |= {"architecture": "deploy.demo_models:digits_cnn",
                    "architecture_kwargs": {"channels": 32}}
            save_file({k: v.contiguous() for k, v in module.state_dict().items()},
                      str(vdir / "model.safetensors"))
        elif fmt == "torchscript":
            torch.jit.script(module).save(str(vdir / "model.pt"))
        elif fmt == "torch_export":
            save_exported(module, example, vdir, input_name="pixels")
        else:
            save_onnx(module, example, vdir, input_name="pixels")
        (root / fmt / "config.yaml").write_text(yaml.safe_dump(cfg))


def _ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1e3, 4)


def _p50_forward(module: torch.nn.Module, x: torch.Tensor, rounds: int) -> float:
    times = []
    with torch.inference_mode():
        for _ in range(3):
            module(x)
        for _ in range(rounds):
            t0 = time.perf_counter()
            module(x)
            times.append(time.perf_counter() - t0)
    return _ms(times)


def _first(raw: Any) -> torch.Tensor:
    return raw[0] if isinstance(raw, (tuple, list)) else raw


async def measure_format(root: Path, fmt: str, source: torch.nn.Module, rounds: int
                         ) -> dict[str, Any]:
    model_dir = root / fmt
    config = read_config(model_dir)
    loader = lambda: load_module(model_dir / "1", config)  # noqa: E731
    load_times = []
    for _ in range(max(3, rounds // 20)):
        t0 = time.perf_counter()
        packed = pack(loader().eval())
        load_times.append(time.perf_counter() - t0)
    # Two copies of the model, a device arena with room for one: each ensure() is a swap-in.
    spec = DeviceSpec(kind="cpu", memory_budget_bytes=packed.nbytes * 3 // 2 + 4096)
    tiers = Residency(spec)
    for key in ("a", "b"):
        p = pack(loader().eval())
        tiers.register(key, loader, Priority.INTERACTIVE, p, 0.0)
    swaps = [await tiers.ensure(k, Priority.INTERACTIVE, {})
             for _ in range(max(5, rounds // 10)) for k in ("a", "b")]
    assert tiers.stats.swaps == len(swaps), "every ensure() must have been a swap-in"
    module = tiers.module("b")
    x1, x64 = torch.rand(1, 64) * 16, torch.rand(64, 64) * 16
    with torch.inference_mode():
        diff = float((_first(module(x64)) - source(x64)).abs().max())
    return {"load_ms": _ms(load_times), "swap_in_ms": _ms(swaps),
            "packed_bytes": packed.nbytes,
            "file_bytes": sum(f.stat().st_size for f in (model_dir / "1").iterdir()),
            "p50_forward_ms_b1": _p50_forward(module, x1, rounds),
            "p50_forward_ms_b64": _p50_forward(module, x64, rounds),
            "max_abs_diff_vs_torch": diff}


def run_compile(root: Path, rounds: int) -> dict[str, Any]:
    """Eager vs compiled safetensors digits-large, each in a fresh process; then a restart."""
    cache = Path(tempfile.mkdtemp(prefix="ts-inductor-"))
    out: dict[str, Any] = {"mode": "default", "inductor_cache": "fresh folder per run"}
    for arm, compiled in (("off", False), ("on", True), ("on_restart", True)):
        cmd = [sys.executable, "-m", "benchmarks._formats_arms", "compile", str(root),
               str(cache), str(rounds), "1" if compiled else "0"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"compile arm {arm} failed: {res.stderr[-2000:]}")
        out[arm] = parse_probe(res.stdout)
    off, on, warm = out["off"], out["on"], out["on_restart"]
    out["first_request_ratio_on_vs_off"] = round(on["first_request_ms"] /
                                                 off["first_request_ms"], 2)
    out["steady_p50_ratio_on_vs_off_b64"] = round(on["p50_ms_b64"] / off["p50_ms_b64"], 3)
    out["warm_start_first_request_ms"] = warm["first_request_ms"]
    out["warm_start_speedup_vs_cold"] = round(on["first_request_ms"] /
                                              warm["first_request_ms"], 2)
    return out


def targets(formats: dict[str, Any], compiled: dict[str, Any] | None,
            affinity: dict[str, Any]) -> dict[str, bool]:
    ts = formats["torchscript"]
    t: dict[str, bool] = {
        "all_formats_match_torch": all(f["max_abs_diff_vs_torch"] < 1e-4
                                       for f in formats.values()),
        # same bytes through the same flat-buffer path: within 2x of TorchScript's swap-in
        "export_onnx_swap_in_within_2x_torchscript": all(
            formats[f]["swap_in_ms"] <= 2 * ts["swap_in_ms"] + 0.05
            for f in ("torch_export", "onnx")),
        "affinity_not_slower": affinity["throughput_ratio_on_vs_off"] >= 0.95,
    }
    if compiled is not None:
        t["compile_restart_reuses_cache"] = compiled["warm_start_speedup_vs_cold"] >= 2.0
    return t


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repo", default="var/model_repository", type=Path)
    ap.add_argument("--affinity-s", type=float, default=None)
    args = ap.parse_args(argv)
    rounds = 40 if args.quick else 300
    source, weights = source_model(args.repo)
    with tempfile.TemporaryDirectory(prefix="ts-formats-") as tmp:
        root = Path(tmp)
        write_formats(source, root)
        formats = {f: asyncio.run(measure_format(root, f, source, rounds)) for f in FORMATS}
        compiled = None if args.quick else run_compile(root, rounds)
        affinity = affinity_arm(root / "torchscript", seconds=args.affinity_s or (
            2.0 if args.quick else 8.0))
    ts = formats["torchscript"]
    for f in formats.values():
        f["vs_torchscript"] = {k: round(f[k] / ts[k], 3) for k in
                               ("load_ms", "swap_in_ms", "p50_forward_ms_b1",
                                "p50_forward_ms_b64")}
    result = {
        "benchmark": "formats", "model": MODEL, "weights": weights, "quick": args.quick,
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads()},
        "formats": formats, "compile": compiled or {"skipped": "--quick"},
        "affinity": affinity,
    }
    met = targets(formats, compiled, affinity)
    result["targets"] = met
    result["meets_targets"] = all(met.values())
    return emit(result, args.json)


if __name__ == "__main__":
    main()
