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
    ``inline_ms`` (CPU only; 0 turns it off): a chunk whose estimated work is at most this runs
    on the worker's event loop thread, with one intra-op thread, instead of the device thread.
    A hop to the device thread and back costs ~0.5 ms on a busy 2-core host, more than a small
    model's forward pass, and under load it cost 40 % of background throughput. A model runs
    inline only after ``INLINE_AFTER_RUNS`` measured runs on the device thread, and never again
    once a chunk of it took 10x ``inline_ms`` (a hang blocks the loop at most once). Requests
    that arrive at such an idle device in one event-loop tick run as one batch
    (``policies.inline.TickGather``).
    ``inline_bounded_only``: inline only models whose forward pass is proven bounded by its input
    shapes (``pool._private.bounded``: a TorchScript or exported graph without loops, Python
    calls or values read as sizes, or an ONNX graph by ``pool._private.bounded_onnx``'s rules),
    so no request's values can hang the loop; such a graph's estimate is its forward's measured
    CPU, a fixed part plus a part per row (``policies.estimates.ChunkCost``; it cannot sleep),
    not the device thread's wall time, which behind a busy loop is mostly waiting for the GIL.
    For loops shared with other work that must stay responsive (the ingress's in-process CPU
    pool); 0 ``inline_ms`` keeps every chunk on the device thread.
    ``pin_cores`` (CPU only; ``auto`` | ``on`` | ``off``): with two or more replicas on a
    machine, each pins its threads to its own share of the physical cores; ``auto`` does so on
    multi-socket machines only (``pool._private.cpu_affinity`` says why).
    """

    kind: str = "cpu"  # "cpu" | "cuda"
    index: int = 0
    memory_budget_bytes: int | None = None
    reserve_bytes: int = 0
    host_budget_bytes: int | None = None
    slice_ms: float = 50.0
    chunk_size: int = 256
    threads: int | None = None
    inline_ms: float = 3.0
    inline_bounded_only: bool = False
    pin_cores: str = "auto"

    def __post_init__(self) -> None:
        if self.kind not in ("cpu", "cuda"):
            raise ValueError(f"DeviceSpec.kind must be 'cpu' or 'cuda', got {self.kind!r}")
        if self.inline_ms < 0:
            raise ValueError(f"DeviceSpec.inline_ms must be >= 0, got {self.inline_ms}")

    @property
    def torch_device(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def label(self) -> str:
        return self.torch_device
