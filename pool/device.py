"""Device description for a worker: which device, and its memory budgets."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DeviceSpec"]


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device a worker owns.

    ``memory_budget_bytes`` caps model weights resident on the device (required on CPU, where it
    makes the CPU stand-in behave like a GPU; on CUDA None means "capacity from NVML/torch").
    ``host_budget_bytes`` bounds the host tier (weights kept in host memory; LRU back to disk).
    """

    kind: str = "cpu"  # "cpu" | "cuda"
    index: int = 0
    memory_budget_bytes: int | None = None
    reserve_bytes: int = 0
    host_budget_bytes: int | None = None
    slice_ms: float = 50.0
    chunk_size: int = 256
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "cuda"):
            raise ValueError(f"DeviceSpec.kind must be 'cpu' or 'cuda', got {self.kind!r}")

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def label(self) -> str:
        return self.torch_device
