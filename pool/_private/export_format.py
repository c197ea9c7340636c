"""``format: torch_export``: programs saved with ``torch.export.save`` (``model.pt2``).

``torch.export.load`` in torch 2.13 is *not* safe on untrusted files by itself (its docstring
says so): a weight or constant whose payload is marked ``use_pickle`` is read with
``torch.load(weights_only=False)``, "opaque" constants with ``pickle.loads``, torchbind objects
with ``torch._C._pickle_load_obj``, legacy ``.pt`` weight files and the sample inputs through
``deserialize_torch_artifact``, which retries with ``weights_only=False`` when the safe load
fails. So before calling it, :func:`check_archive` reads the archive itself and refuses
anything that would reach one of those paths:

- every weight and constant must be a raw tensor payload (``use_pickle: false``, a
  ``tensor_constant`` file name), and the payload configs must be present; the torch <= 2.7
  layout (a top-level ``version`` record), which ``torch.export.load`` falls back to when the
  current layout fails, is refused outright;
- every remaining pickled record (``*.pt``: the sample inputs) must load with
  ``torch.load(weights_only=True)`` here, so torch's own first, safe attempt succeeds on the
  same bytes and its unsafe fallback never runs;
- AOTInductor packages (a compiled shared library: native code) are refused unless the
  operator allows them (``trust.allow_aoti``). Their weights live inside the compiled runtime
  (partly folded into its code), so they cannot be packed or swapped: they load only for models
  with ``device: cpu`` (the CPU pool, which holds them in host memory and never swaps).
  AOTInductor compiles here with the installed gcc 12 (a small MLP: ~75 s on a busy 2-core
  host) and the package loads and matches the eager model.

After the check, loading runs only torch's graph deserialiser (JSON) and tensor reads. The
program's ``module()`` is an ``fx.GraphModule`` whose parameters and buffers are ordinary
tensors, so ``pool._private.weights.pack`` moves them into the flat host buffer and ``bind``
re-points them on the device like any other format.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import torch
from torch import nn

from pool.errors import ModelLoadError, ModelRefused

__all__ = ["check_archive", "is_aoti_package", "load_exported"]

_TENSOR_CONSTANT = "tensor_constant"  # torch.export.pt2_archive.constants prefix
_MAX_PICKLED_BYTES = 16 << 20  # sample inputs larger than this are refused (they are examples)


def _entries(z: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    # Records sit under one top-level folder named after the archive ("<name>/data/...").
    out = {}
    for info in z.infolist():
        _, _, rest = info.filename.partition("/")
        out[rest] = info
    return out


def is_aoti_package(entries: dict[str, zipfile.ZipInfo]) -> bool:
    """True for an AOTInductor package (compiled .so / .cpp records under data/aotinductor)."""
    return any(name.startswith("data/aotinductor/") for name in entries)


def check_archive(path: Path, shown: str, *, allow_aoti: bool = False) -> bool:
    """Refuse a ``.pt2`` that ``torch.export.load`` would unpickle arbitrary objects from.

    Returns True when the archive is an AOTInductor package (allowed by ``allow_aoti``).
    Raises ModelLoadError naming ``shown`` and the record.
    """
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise ModelLoadError(shown, f"not a torch.export archive ({e})", field="format") from None
    with z:
        entries = _entries(z)
        if is_aoti_package(entries):
            if not allow_aoti:
                raise ModelRefused(shown, "AOTInductor package (compiled native code) refused: "
                                     "the operator has not set trust.allow_aoti", field="format")
            return True
        if "version" in z.namelist():
            # torch.export.load's fallback for torch <= 2.7 archives reads a top-level
            # "version" and unpickles serialized_*.json/.pt with a weights_only=False retry
            raise ModelRefused(shown, "legacy torch.export archive (top-level 'version'); "
                                 "re-save with torch.export.save from torch >= 2.8",
                                 field="format")
        for kind in ("weights", "constants"):
            _check_payloads(z, entries, kind, shown)
        for info in z.infolist():
            if info.filename.endswith(".pt"):
                _check_pickled(z, info, info.filename, shown)
    return False


def _check_payloads(z: zipfile.ZipFile, entries: dict[str, zipfile.ZipInfo], kind: str,
                    shown: str) -> None:
    configs = [n for n in entries if n.startswith(f"data/{kind}/") and n.endswith("_config.json")]
    if not configs:
        raise ModelLoadError(shown, f"no data/{kind}/*_config.json: a legacy or foreign layout "
                             "(re-save with torch.export.save from torch >= 2.8)", field="format")
    for name in configs:
        try:
            config = json.loads(z.read(entries[name]))["config"]
        except (ValueError, KeyError, TypeError) as e:
            raise ModelLoadError(shown, f"{name}: unreadable ({e})", field="format") from None
        for fqn, meta in config.items():
            if meta.get("use_pickle"):
                raise ModelRefused(shown, f"{name}: {kind} {fqn!r} is pickled; only raw "
                                     "tensor payloads are loaded", field="format")
            if kind == "constants" and not str(meta.get("path_name", "")).startswith(
                    _TENSOR_CONSTANT):
                raise ModelRefused(shown, f"{name}: constant {fqn!r} is a Python/torchbind "
                                     "object, not a tensor; refused", field="format")


def _check_pickled(z: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, shown: str) -> None:
    if info.file_size > _MAX_PICKLED_BYTES:
        raise ModelRefused(shown, f"{name}: {info.file_size} bytes of pickled data (limit "
                             f"{_MAX_PICKLED_BYTES})", field="format")
    try:
        torch.load(io.BytesIO(z.read(info)), weights_only=True)
    except Exception as e:
        raise ModelRefused(shown, f"{name}: not loadable with weights_only=True "
                             f"({type(e).__name__}); refused", field="format") from None


def load_exported(path: Path, shown: str, *, allow_aoti: bool = False,
                  device: str = "any") -> nn.Module:
    """Check, then load ``path`` as an ``nn.Module`` on the CPU (weights as plain tensors).

    ``device`` is the model config's: an AOTInductor package needs ``cpu`` (see above).
    """
    aoti = check_archive(path, shown, allow_aoti=allow_aoti)
    if aoti and device != "cpu":
        raise ModelLoadError(shown, "an AOTInductor package's weights cannot be swapped: set "
                             f"device: cpu (got {device!r})", field="device")
    try:
        if aoti:
            return _AotiModule(torch._inductor.aoti_load_package(str(path)))
        program = torch.export.load(str(path))
        return _ExportedModule(program.module())
    except ModelLoadError:
        raise
    except Exception as e:
        text = f"{type(e).__name__}: {e}".replace("\n", " ")[:300]
        raise ModelLoadError(shown, f"torch.export.load failed ({text})", field="format") from e


class _ExportedModule(nn.Module):
    """An exported program's module. Its train/eval behaviour was fixed when it was exported
    (torch refuses ``.eval()`` on it), so switching modes here only sets the flag."""

    def __init__(self, graph: nn.Module) -> None:
        super().__init__()
        self.graph = graph

    def train(self, mode: bool = True) -> _ExportedModule:
        self.training = mode
        return self

    def forward(self, *args: torch.Tensor):
        return self.graph(*args)


class _AotiModule(nn.Module):
    """An AOTInductor runner as a module. Its weights live inside the compiled package, so it
    has no parameters to pack: the host and device tiers account it at the layout minimum."""

    def __init__(self, runner) -> None:
        super().__init__()
        self.runner = runner

    def forward(self, *args: torch.Tensor):
        return self.runner(*args)
