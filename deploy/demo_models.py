"""Architectures of the demo models, importable by path for safetensors loading.

Each factory returns an ``nn.Module`` whose forward takes raw features (standardisation is baked
in as buffers) and returns logits, so callers send data as the dataset ships it.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["TabularMLP", "DigitsCNN", "tabular_mlp", "digits_linear", "digits_cnn"]


class TabularMLP(nn.Module):
    """Standardise, then an MLP (``hidden=[]`` is logistic regression)."""

    def __init__(self, in_features: int, hidden: list[int], out_features: int) -> None:
        super().__init__()
        self.mean: torch.Tensor
        self.scale: torch.Tensor
        self.register_buffer("mean", torch.zeros(in_features))
        self.register_buffer("scale", torch.ones(in_features))
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) / self.scale)


class DigitsCNN(nn.Module):
    """A small CNN over the 8x8 digits images (flattened 64 pixels in 0..16)."""

    def __init__(self, channels: int = 32) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(2 * channels * 16, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features((x / 16.0).reshape(-1, 1, 8, 8)))


def tabular_mlp(in_features: int, hidden: list[int], out_features: int) -> TabularMLP:
    return TabularMLP(in_features, list(hidden), out_features)


def digits_linear() -> TabularMLP:
    return TabularMLP(64, [], 10)


def digits_cnn(channels: int = 32) -> DigitsCNN:
    return DigitsCNN(channels)
