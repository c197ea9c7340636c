"""Load one model version from disk into host memory, safely.

TorchScript archives are read with ``torch.jit.load`` (TorchScript's own restricted format, no
arbitrary pickles); safetensors files hold tensors only and the architecture comes from an import
path in the model config. Nothing here calls ``pickle`` or ``torch.load`` without
``weights_only=True``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import torch
from torch import nn

from pool.config import ModelConfig
from pool.errors import ModelLoadError

__all__ = ["WEIGHT_FILES", "load_module", "resolve_callable"]

WEIGHT_FILES = {"torchscript": "model.pt", "safetensors": "model.safetensors"}


def resolve_callable(path: str, *, what: str = "architecture"):
    """Import ``'package.module:attr'``; raise ValueError naming ``what`` when it cannot."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what} must look like 'package.module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{what} {path!r}: cannot import {module_name!r} ({e})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{what} {path!r}: module {module_name!r} has no {attr!r}") from None


def load_module(version_dir: Path, config: ModelConfig) -> nn.Module:
    """Load the weights in ``version_dir`` onto the CPU, in eval mode."""
    weights = version_dir / WEIGHT_FILES[config.format]
    if not weights.is_file():
        raise ModelLoadError(str(weights), "weight file missing", field="format")
    if config.format == "torchscript":
        try:
            module = torch.jit.load(str(weights), map_location="cpu")
        except Exception as e:
            raise ModelLoadError(str(weights), f"not a TorchScript archive ({_short(e)})") from e
        return module.eval()
    return _load_safetensors(weights, config)


def _load_safetensors(weights: Path, config: ModelConfig) -> nn.Module:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    assert config.architecture is not None  # ModelConfig validates this
    try:
        factory = resolve_callable(config.architecture)
        module = factory(**config.architecture_kwargs)
    except Exception as e:
        raise ModelLoadError(str(weights), _short(e), field="architecture") from e
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelLoadError(str(weights), f"not a safetensors file ({_short(e)})") from e
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ModelLoadError(str(weights), f"weights do not fit the architecture ({_short(e)})",
                             field="architecture_kwargs") from e
    return module.eval()


def _short(e: BaseException, limit: int = 300) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
