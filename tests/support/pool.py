"""Pool test kit: small real models, their configs and loaders, and a byte-counting device
memory (a fake that subclasses the real ``DeviceMemory``)."""

from __future__ import annotations

import threading
import time

import torch
from torch import nn

from pool import ModelKey
from pool._private.device_memory import DeviceMemory, Region
from pool.config import ModelConfig

__all__ = ["HIDDEN", "MODEL_BYTES", "SOMETIMES_SLOW", "FakeDeviceMemory", "Loader",
           "SometimesSlow", "config", "key"]

HIDDEN = 64
MODEL_BYTES = 5 * 1024  # Linear(16,64)+Linear(64,4) packed with alignment: ~5.4 KB


def config(name, max_batch=64):
    return ModelConfig(
        name=name, inputs=[{"name": "x", "dtype": "FP32", "shape": [16]}],
        outputs=[{"name": "y", "dtype": "FP32", "shape": [4]}],
        max_batch_size=max_batch, batch_wait_ms=0,
    )


class Loader:
    """Builds a seeded MLP (optionally TorchScript); counts disk loads."""

    def __init__(self, seed, script=False):
        self.seed, self.script, self.calls = seed, script, 0

    def build(self):
        torch.manual_seed(self.seed)
        m = nn.Sequential(nn.Linear(16, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 4)).eval()
        return torch.jit.script(m) if self.script else m

    def __call__(self):
        self.calls += 1
        return self.build()


def key(i):
    return ModelKey(f"m{i}", "1")


SOMETIMES_SLOW = ModelKey("sometimes-slow", "1")


class SometimesSlow(nn.Module):
    """A real linear model whose forward blocks while ``hang`` is set (a hung kernel)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 2)
        self.hang = threading.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.hang.is_set():
            time.sleep(0.3)  # real time: the worker measures compute with perf_counter
        return self.lin(x)


class FakeDeviceMemory(DeviceMemory):
    """Counts bytes, no tensors; ``fail_next`` makes the next allocations report OOM."""

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity = capacity_bytes
        self.used = 0
        self.fail_next = 0
        self.allocations = 0

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def allocate(self, nbytes: int) -> Region | None:
        if self.fail_next:
            self.fail_next -= 1
            return None
        if self.used + nbytes > self._capacity:
            return None
        self.used += nbytes
        self.allocations += 1
        return Region(0, nbytes, None)

    def release(self, region: Region) -> None:
        self.used -= region.nbytes
