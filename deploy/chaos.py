"""A chaos model for fault drills: a real classifier that hangs or fails on request.

Use it as a safetensors architecture (``architecture: deploy.chaos:chaos_mlp``). Its first input
feature is the control channel: a row whose first value equals ``hang_value`` makes the forward
pass sleep ``hang_s`` seconds (a hung kernel: the device is busy meanwhile); ``fail_value`` makes it
raise. Every other row is classified normally, so the model also serves real traffic.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from deploy.demo_models import TabularMLP

__all__ = ["ChaosMLP", "chaos_mlp"]


class ChaosMLP(TabularMLP):
    def __init__(self, in_features: int, hidden: list[int], out_features: int, *,
                 hang_value: float = -1000.0, fail_value: float = -2000.0,
                 hang_s: float = 2.0) -> None:
        super().__init__(in_features, hidden, out_features)
        self.hang_value = hang_value
        self.fail_value = fail_value
        self.hang_s = hang_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = x[:, 0]
        if bool((first == self.fail_value).any()):
            raise RuntimeError("chaos: injected model failure")
        if bool((first == self.hang_value).any()):
            time.sleep(self.hang_s)
        return super().forward(x)


def chaos_mlp(in_features: int, hidden: list[int], out_features: int, **kw) -> nn.Module:
    return ChaosMLP(in_features, list(hidden), out_features, **kw)
