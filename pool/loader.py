"""Load one model version from disk into host memory, safely.

TorchScript archives are read with ``torch.jit.load`` (TorchScript's own restricted format, no
arbitrary pickles, but its code can read and write files: ``trust.allow_torchscript`` gates it);
safetensors files hold tensors only and the architecture comes from an import path in the model
config, resolved only inside the operator's module allowlist (``common.trust``); ``torch.export``
programs (``model.pt2``) are checked record by record before ``torch.export.load`` so it never
reaches its unpickling paths (``pool._private.export_format``); ONNX graphs run in ONNX Runtime
(``pool._private.onnx_format``). Nothing here calls ``pickle`` or ``torch.load`` without
``weights_only=True``. A model whose config says ``compile:`` is wrapped in ``torch.compile``
here, once per loaded version (the warm-up runs the compilation). Error messages name files
relative to the repository (``<model>/<version>/<file>``), never absolute paths.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from common.trust import TrustSettings, resolve_callable
from pool._private.export_format import load_exported
from pool._private.onnx_format import load_onnx
from pool.config import ModelConfig
from pool.errors import ModelLoadError

__all__ = ["WEIGHT_FILES", "load_module", "shown_path"]

WEIGHT_FILES = {"torchscript": "model.pt", "safetensors": "model.safetensors",
                "torch_export": "model.pt2", "onnx": "model.onnx"}


def shown_path(path: Path, parts: int = 3) -> str:
    """``<model>/<version>/<file>``: how load errors name a file (never an absolute path)."""
    return "/".join(path.parts[-parts:])


def load_module(version_dir: Path, config: ModelConfig, *,
                trust: TrustSettings = TrustSettings()) -> nn.Module:
    """Load the weights in ``version_dir`` onto the CPU, in eval mode, within ``trust``."""
    module = _load_eager(version_dir, config, trust)
    if config.compile is None:
        return module
    return torch.compile(module, mode=config.compile.mode,  # type: ignore[return-value]
                         dynamic=config.compile.dynamic)


def _load_eager(version_dir: Path, config: ModelConfig, trust: TrustSettings) -> nn.Module:
    weights = version_dir / WEIGHT_FILES[config.format]
    shown = shown_path(weights)
    if not weights.is_file():
        raise ModelLoadError(shown, "weight file missing", field="format")
    if config.format == "torch_export":
        return load_exported(weights, shown, allow_aoti=trust.allow_aoti,
                             device=config.device).eval()
    if config.format == "onnx":
        return load_onnx(weights, shown, config).eval()
    if config.format == "torchscript":
        if not trust.allow_torchscript:
            raise ModelLoadError(shown, "TorchScript is disabled by the operator (app setting "
                                 "trust.allow_torchscript: false)", field="format")
        try:
            module = torch.jit.load(str(weights), map_location="cpu")
        except Exception as e:
            raise ModelLoadError(shown, f"not a TorchScript archive ({_short(e, weights)})") from e
        return module.eval()
    return _load_safetensors(weights, config, trust)


def _load_safetensors(weights: Path, config: ModelConfig, trust: TrustSettings) -> nn.Module:
    assert config.architecture is not None  # ModelConfig validates this
    shown = shown_path(weights)
    try:
        factory = resolve_callable(config.architecture, allow=trust.allowlist,
                                   what="architecture")
        module = factory(**config.architecture_kwargs)
    except Exception as e:
        raise ModelLoadError(shown, _short(e, weights), field="architecture") from e
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelLoadError(shown, f"not a safetensors file ({_short(e, weights)})") from e
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ModelLoadError(shown, f"weights do not fit the architecture "
                             f"({_short(e, weights)})", field="architecture_kwargs") from e
    return module.eval()


def _short(e: BaseException, weights: Path, limit: int = 300) -> str:
    # Library messages may quote the absolute file path: show it relative to the repository.
    root = str(weights.parents[2]) + "/"
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace(root, "")
    return text if len(text) <= limit else text[: limit - 3] + "..."
