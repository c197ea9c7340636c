"""The demo's modern formats: one trained model re-saved with ``torch.export`` and as ONNX.

``digits-large-export`` / ``digits-large-onnx`` carry digits-large's trained weights, read back
from its TorchScript archive into a fresh ``DigitsCNN`` (so the formats can be compared on the
very same weights: tests and ``benchmarks.formats`` do). The batch dimension is dynamic in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["MAX_EXPORT_BATCH", "ONNX_OPSET", "save_exported", "save_onnx", "trained_source"]

MAX_EXPORT_BATCH = 65536  # the largest batch the exported programs accept
ONNX_OPSET = 18  # widely supported by ONNX Runtime releases (1.14+)


def trained_source(repo: Path, source: str, fresh: nn.Module,
                   manifest: dict[str, Any]) -> tuple[nn.Module, float]:
    """``fresh`` with the weights of the already built ``source`` model, and its accuracy."""
    path = repo / source / "1" / "model.pt"
    if not path.is_file() or source not in manifest:
        raise ValueError(f"build {source!r} first (its weights are re-saved); missing {path}")
    scripted = torch.jit.load(str(path), map_location="cpu")
    fresh.load_state_dict(scripted.state_dict(), strict=True)
    return fresh.eval(), float(manifest[source]["test_accuracy"])


def _batch_dim() -> Any:
    return torch.export.Dim("batch", min=1, max=MAX_EXPORT_BATCH)


def save_exported(model: nn.Module, example: torch.Tensor, version_dir: Path, *,
                  input_name: str) -> Path:
    """``torch.export.export`` + ``torch.export.save`` to ``version_dir/model.pt2``."""
    program = torch.export.export(model.eval(), (example,), dynamic_shapes=({0: _batch_dim()},))
    out = version_dir / "model.pt2"
    torch.export.save(program, str(out))
    return out


def save_onnx(model: nn.Module, example: torch.Tensor, version_dir: Path, *,
              input_name: str, opset: int = ONNX_OPSET) -> Path:
    """``torch.onnx.export`` (the torch.export-based exporter; needs ``onnxscript``) to
    ``version_dir/model.onnx``, weights embedded, batch dimension dynamic."""
    out = version_dir / "model.onnx"
    torch.onnx.export(model.eval(), (example,), str(out), input_names=[input_name],
                      output_names=["logits"], dynamic_shapes=({0: _batch_dim()},),
                      opset_version=opset, dynamo=True, external_data=False, verbose=False)
    return out
