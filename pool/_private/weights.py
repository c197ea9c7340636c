"""A model's weights as one flat byte buffer, so swapping is one copy.

:func:`pack` moves every parameter and buffer of a module into one contiguous host buffer (pinned
on CUDA) and makes the module's tensors views into it. :func:`bind` re-points the same module at
another buffer of the same layout (a device region, or the host buffer again). Re-pointing uses
``tensor.data = view``, which changes the tensor in place, so it works for TorchScript modules too
and never rebuilds the module.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["PackedModel", "Slot", "bind", "pack"]

_ALIGN = 64  # bytes; keeps every view aligned for any dtype and for vectorised copies


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one tensor lives in the flat buffer."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclass(slots=True)
class PackedModel:
    """A module plus the layout of its weights; ``host`` is None once the host tier dropped it."""

    module: nn.Module
    tensors: tuple[torch.Tensor, ...]
    slots: tuple[Slot, ...]
    nbytes: int
    host: torch.Tensor | None
    # Views of ``host``, built once: a swap-out only re-points (about 0.4 us a tensor, against
    # about 4 us to build each view again).
    host_views: list[torch.Tensor] | None = None
    # Views of the CPU arena region it was last bound to, by (address, bytes): a model swapped
    # back into the same region is re-pointed without building views. CPU only: on CUDA a
    # cached view would keep a freed region's block allocated.
    region_views: tuple[tuple[int, int], list[torch.Tensor]] | None = None


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _module_tensors(module: nn.Module) -> list[torch.Tensor]:
    seen: set[int] = set()
    out: list[torch.Tensor] = []
    for t in [*module.parameters(), *module.buffers()]:
        if t is None or id(t) in seen:
            continue
        seen.add(id(t))
        out.append(t)
    return out


def pack(module: nn.Module, *, pin: bool = False) -> PackedModel:
    """Copy the module's weights into one host buffer (pinned if ``pin``) and bind it there."""
    tensors = _module_tensors(module)
    slots, offset = [], 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        slots.append(Slot(offset, nbytes, t.dtype, tuple(t.shape)))
        offset = _align(offset + nbytes)
    total = max(offset, _ALIGN)
    host = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
    packed = PackedModel(module, tuple(tensors), tuple(slots), total, host)
    with torch.no_grad():
        for t, view in zip(tensors, views(packed, host), strict=True):
            view.copy_(t.detach().to("cpu"))
    bind(packed, host)
    return packed


def views(packed: PackedModel, flat: torch.Tensor) -> list[torch.Tensor]:
    """Typed views of ``flat`` (a uint8 buffer of the packed layout), one per tensor."""
    out = []
    for s in packed.slots:
        raw = flat[s.offset : s.offset + s.nbytes]
        out.append(raw.view(s.dtype).view(s.shape) if s.nbytes else
                   torch.empty(s.shape, dtype=s.dtype, device=flat.device))
    return out


def bind(packed: PackedModel, flat: torch.Tensor) -> None:
    """Point every weight of the module at its view in ``flat`` (no copy)."""
    if flat.numel() < packed.nbytes:
        raise ValueError(f"buffer of {flat.numel()} bytes is smaller than layout {packed.nbytes}")
    if flat is packed.host:
        if packed.host_views is None:
            packed.host_views = views(packed, flat)
        for t, view in zip(packed.tensors, packed.host_views, strict=True):
            t.data = view
        return
    if flat.device.type == "cpu":  # the CPU stand-in's arena (a region of one live buffer)
        where = (flat.data_ptr(), flat.numel())
        if packed.region_views is None or packed.region_views[0] != where:
            packed.region_views = (where, views(packed, flat))
        for t, view in zip(packed.tensors, packed.region_views[1], strict=True):
            t.data = view
        return
    for t, view in zip(packed.tensors, views(packed, flat), strict=True):
        t.data = view
