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

import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from common.trust import TrustSettings, check_import_path, resolve_callable
from pool._private.export_format import load_exported
from pool._private.onnx_format import load_onnx
from pool.config import ModelConfig
from pool.errors import ModelLoadError, ModelRefused

__all__ = ["WEIGHT_FILES", "load_module", "pickled", "shown_path"]

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
    if config.format in ("torchscript", "safetensors") and pickled(weights):
        raise ModelRefused(shown, f"a pickled archive (torch.save / pickle), not "
                           f"{config.format}: refused, nothing was unpickled", field="format")
    if config.format == "torch_export":
        return load_exported(weights, shown, allow_aoti=trust.allow_aoti,
                             device=config.device).eval()
    if config.format == "onnx":
        return load_onnx(weights, shown, config).eval()
    if config.format == "torchscript":
        if not trust.allow_torchscript:
            raise ModelRefused(shown, "TorchScript is disabled by the operator (app setting "
                                 "trust.allow_torchscript: false)", field="format")
        try:
            module = torch.jit.load(str(weights), map_location="cpu")
        except Exception as e:
            raise ModelLoadError(shown, f"not a TorchScript archive ({_short(e, weights)})",
                                 field="format") from e
        return module.eval()
    return _load_safetensors(weights, config, trust)


def _load_safetensors(weights: Path, config: ModelConfig, trust: TrustSettings) -> nn.Module:
    assert config.architecture is not None  # ModelConfig validates this
    shown = shown_path(weights)
    try:
        check_import_path(config.architecture, allow=trust.allowlist, what="architecture")
    except ValueError as e:  # named outside the allowlist: refused before any import
        raise ModelRefused(shown, str(e), field="architecture") from None
    try:
        factory = resolve_callable(config.architecture, allow=trust.allowlist,
                                   what="architecture")
        module = factory(**config.architecture_kwargs)
    except Exception as e:
        raise ModelLoadError(shown, _short(e, weights), field="architecture") from e
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise ModelLoadError(shown, f"not a safetensors file ({_short(e, weights)})",
                             field="format") from e
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ModelLoadError(shown, f"weights do not fit the architecture "
                             f"({_short(e, weights)})", field="architecture_kwargs") from e
    return module.eval()


def pickled(path: Path) -> bool:
    """Whether ``path`` is a pickle or a ``torch.save`` archive, judged from its bytes only.

    A pickle (protocol 2+, and ``torch.save``'s legacy format) starts with ``0x80`` and the
    protocol number; ``torch.save``'s zip holds ``<archive>/data.pkl`` but, unlike a TorchScript
    archive, no ``constants.pkl`` (TorchScript's code and constants).
    """
    try:
        with path.open("rb") as f:
            head = f.read(2)
        if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
            return True
        if head != b"PK":
            return False
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        return False  # unreadable: the format's own loader says why
    return (any(n.endswith("/data.pkl") or n == "data.pkl" for n in names)
            and not any(n.endswith("constants.pkl") for n in names))


def _short(e: BaseException, weights: Path, limit: int = 300) -> str:
    # Library messages may quote the absolute file path: show it relative to the repository.
    root = str(weights.parents[2]) + "/"
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace(root, "")
    return text if len(text) <= limit else text[: limit - 3] + "..."
