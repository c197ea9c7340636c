"""Write real model versions in each format with the real exporters (no hand-made files)."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml
from torch import nn

from deploy.demo_formats import save_exported, save_onnx
from deploy.demo_models import digits_cnn

ALL_FORMATS = ("torchscript", "safetensors", "torch_export", "onnx")
CHANNELS = 4  # a small DigitsCNN: ~17 k parameters, exported in about a second


def small_cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return digits_cnn(CHANNELS).eval()


def config_dict(name: str, fmt: str, **over) -> dict:
    cfg = {
        "name": name, "format": fmt, "max_batch_size": 64, "batch_wait_ms": 0,
        "inputs": [{"name": "pixels", "dtype": "FP32", "shape": [64]}],
        "outputs": [{"name": "logits", "dtype": "FP32", "shape": [10]}],
    }
    if fmt == "safetensors":
        cfg["architecture"] = "deploy.demo_models:digits_cnn"
        cfg["architecture_kwargs"] = {"channels": CHANNELS}
    cfg.update(over)
    return cfg


def write_config(model_dir: Path, fmt: str, **over) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.yaml").write_text(
        yaml.safe_dump(config_dict(model_dir.name, fmt, **over), sort_keys=False))


def write_version(version_dir: Path, fmt: str, module: nn.Module) -> Path:
    """Save ``module`` in ``fmt`` into ``version_dir`` with that format's own exporter."""
    version_dir.mkdir(parents=True, exist_ok=True)
    example = torch.rand(2, 64) * 16
    if fmt == "torch_export":
        return save_exported(module, example, version_dir, input_name="pixels")
    if fmt == "onnx":
        return save_onnx(module, example, version_dir, input_name="pixels")
    if fmt == "safetensors":
        from safetensors.torch import save_file

        out = version_dir / "model.safetensors"
        save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(out))
        return out
    out = version_dir / "model.pt"
    torch.jit.script(module).save(str(out))
    return out


def first_output(raw) -> torch.Tensor:
    return raw[0] if isinstance(raw, (tuple, list)) else raw
