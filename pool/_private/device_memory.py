"""Device memory behind the memory manager: where a resident model's weights live.

- :class:`ArenaMemory` (CPU stand-in): one preallocated flat tensor the budget's size; a region
  is a slice of it, so a swap-in is a real copy into device-side memory and the budget is a
  hard limit, like a GPU's.
- :class:`CudaMemory`: regions from the CUDA caching allocator; capacity from the budget or the
  device's total memory; an allocation that runs out of memory returns None (the manager evicts
  and retries).
- :class:`HostMemory`: no device copy at all (a CPU session pool without a budget): weights
  stay in the host buffer and residency is bookkeeping only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

__all__ = ["ArenaMemory", "CudaMemory", "DeviceMemory", "HostMemory", "Region"]

_ALIGN = 256


@dataclass(frozen=True, slots=True)
class Region:
    """``nbytes`` of device memory at ``offset``; ``tensor`` is its uint8 view (None: host)."""

    offset: int
    nbytes: int
    tensor: torch.Tensor | None


class DeviceMemory(ABC):
    """Allocates regions for model weights; ``allocate`` returns None when nothing fits."""

    @property
    @abstractmethod
    def capacity_bytes(self) -> int:
        """Bytes available to model weights in all."""

    @abstractmethod
    def allocate(self, nbytes: int) -> Region | None:
        """A region of at least ``nbytes``, or None when it does not fit right now."""

    @abstractmethod
    def release(self, region: Region) -> None:
        """Give a region back."""


class ArenaMemory(DeviceMemory):
    """First-fit allocator over one preallocated tensor (holes are coalesced on release)."""

    def __init__(self, capacity_bytes: int, *, device: str = "cpu") -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"arena capacity_bytes must be > 0, got {capacity_bytes}")
        self._capacity = capacity_bytes
        self._buffer = torch.empty(capacity_bytes, dtype=torch.uint8, device=device)
        self._free: list[tuple[int, int]] = [(0, capacity_bytes)]  # (offset, size), sorted

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def largest_hole(self) -> int:
        return max((size for _, size in self._free), default=0)

    def allocate(self, nbytes: int) -> Region | None:
        need = (max(nbytes, 1) + _ALIGN - 1) // _ALIGN * _ALIGN
        for i, (off, size) in enumerate(self._free):
            if size >= need:
                rest = (off + need, size - need)
                self._free[i : i + 1] = [rest] if rest[1] else []
                return Region(off, need, self._buffer[off : off + need])
        return None

    def release(self, region: Region) -> None:
        holes = sorted([*self._free, (region.offset, region.nbytes)])
        merged: list[tuple[int, int]] = []
        for off, size in holes:
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((off, size))
        self._free = merged


class CudaMemory(DeviceMemory):
    """Regions from the CUDA caching allocator; an OOM is reported as None."""

    def __init__(self, device: str, capacity_bytes: int | None = None) -> None:
        self._device = torch.device(device)
        if capacity_bytes is None:
            _, total = torch.cuda.mem_get_info(self._device)
            capacity_bytes = int(total)
        self._capacity = capacity_bytes

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def allocate(self, nbytes: int) -> Region | None:
        try:
            t = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self._device)
        except torch.cuda.OutOfMemoryError:
            return None
        return Region(0, t.numel(), t)

    def release(self, region: Region) -> None:
        pass  # the tensor is freed when the last view goes; the caching allocator reuses it


class HostMemory(DeviceMemory):
    """No separate device memory: weights are used from the host buffer."""

    def __init__(self, capacity_bytes: int = 1 << 62) -> None:
        self._capacity = capacity_bytes

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def allocate(self, nbytes: int) -> Region | None:
        return Region(0, nbytes, None)

    def release(self, region: Region) -> None:
        pass
