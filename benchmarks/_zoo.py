"""Model families for the co-location benchmark, written as a TorchScript model repository.

- ``encoder`` (default): a BERT-tiny-sized text classifier (token embedding, 4 transformer
  encoder layers of width 256, a linear head; 13.7 MB of weights, 16 tokens in). Many small
  fine-tuned text models, one per tenant or task, is the workload model multiplexing is for, and
  reloading one from disk (``torch.jit.load``) costs ~100x more than copying its weights from
  host memory.
- ``mlp``: a 64-512-512-10 MLP (1.2 MB). Reloading it costs about as much as a Ray Serve request,
  so it shows the case where host-tier swapping buys little.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from torch import nn

__all__ = ["ARCHS", "Arch", "build_repo"]

SEQ, VOCAB = 16, 1000


class TinyEncoder(nn.Module):
    def __init__(self, d: int = 256, layers: int = 4, ff: int = 1024) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        layer = nn.TransformerEncoderLayer(d, 4, ff, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, 10)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(self.emb(tokens)).mean(1))


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


@dataclass(frozen=True)
class Arch:
    build: Callable[[], nn.Module]
    input_name: str
    input_spec: dict
    max_batch_size: int
    sample: Callable[[np.random.Generator], np.ndarray]  # one request's input, batch of 1


ARCHS: dict[str, Arch] = {
    "encoder": Arch(TinyEncoder, "tokens", {"name": "tokens", "dtype": "INT64", "shape": [SEQ]},
                    16, lambda rng: rng.integers(0, VOCAB, (1, SEQ), dtype=np.int64)),
    "mlp": Arch(_mlp, "x", {"name": "x", "dtype": "FP32", "shape": [64]}, 32,
                lambda rng: rng.standard_normal((1, 64), dtype=np.float32)),
}


def build_repo(root: Path, n: int, arch: str) -> int:
    """Write ``n`` seeded TorchScript models of family ``arch`` as a model repository
    (``<root>/<name>/config.yaml`` + ``<root>/<name>/1/model.pt``); returns one model's bytes."""
    spec = ARCHS[arch]
    nbytes = 0
    for i in range(n):
        torch.manual_seed(i)
        m = spec.build().eval()
        name = f"m{i:02d}"
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.yaml").write_text(yaml.safe_dump({
            "name": name,
            "inputs": [spec.input_spec],
            "outputs": [{"name": "y", "dtype": "FP32", "shape": [10]}],
            "max_batch_size": spec.max_batch_size,
            "batch_wait_ms": 0,
        }))
        torch.jit.script(m).save(str(root / name / "1" / "model.pt"))
        nbytes = sum(t.numel() * t.element_size() for t in [*m.parameters(), *m.buffers()])
    return nbytes
