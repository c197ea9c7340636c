"""What every section of the GPU suite shares: the device, result records, models, percentiles."""

from __future__ import annotations

import gc
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from pool.config import ModelConfig

__all__ = ["Env", "check", "config", "linear_stack", "log", "model_bytes", "pct", "skipped"]

NO_CUDA = "no CUDA: torch.cuda.is_available() is False (this is a CUDA-only path)"


@dataclass(frozen=True, slots=True)
class Env:
    """The device the suite runs on; ``quick`` shrinks every section (the CI smoke test)."""

    kind: str  # "cuda" | "cpu"
    quick: bool = False

    @property
    def cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def device(self) -> str:
        return "cuda:0" if self.cuda else "cpu"

    @property
    def name(self) -> str:
        return torch.cuda.get_device_name(0) if self.cuda else "cpu (stand-in)"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def free_cache(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


def config(name: str, width: int) -> ModelConfig:
    """The config of a ``linear_stack`` model of this width (one FP32 input and output)."""
    return ModelConfig(name=name, inputs=[{"name": "x", "dtype": "FP32", "shape": [width]}],
                       outputs=[{"name": "y", "dtype": "FP32", "shape": [width]}],
                       max_batch_size=64, batch_wait_ms=0)


def check(passed: bool, reason: str, **detail: object) -> dict:
    """One correctness check's record: pass/fail with its reason and measured details."""
    return {"status": "pass" if passed else "fail", "reason": reason, **detail}


def skipped(reason: str = NO_CUDA) -> dict:
    return {"status": "skipped", "reason": reason}


def log(msg: str) -> None:
    print(f"[gpu_suite {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def linear_stack(nbytes: int, width: int, seed: int, *, relu: bool = True) -> nn.Sequential:
    """A stack of bias-free ``width``x``width`` fp32 layers holding about ``nbytes`` of weights
    (at least one layer); its parameter order is its layer order (what pipelining relies on)."""
    torch.manual_seed(seed)
    layers = max(1, round(nbytes / (width * width * 4)))
    mods: list[nn.Module] = []
    for _ in range(layers):
        lin = nn.Linear(width, width, bias=False)
        with torch.no_grad():  # scaled so activations stay O(1) through deep stacks
            lin.weight.uniform_(-1.0, 1.0).mul_((3.0 / width) ** 0.5)
        mods += [lin, nn.ReLU()] if relu else [lin]
    return nn.Sequential(*mods).eval()


def model_bytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in [*module.parameters(), *module.buffers()])


def pct(values: list[float], q: float) -> float | None:
    """``q``-th percentile in ms of seconds ``values`` (None when empty)."""
    return round(float(np.percentile(np.array(values) * 1e3, q)), 3) if values else None
