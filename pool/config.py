"""Per-model configuration: ``<repo>/<model>/config.yaml``.

Pydantic at the edge. Every field has a description; cross-field checks echo the bad values.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from common.fallback_types import FallbackStep
from policies.priority import Priority, parse_priority

__all__ = [
    "DTYPES",
    "TensorSpec",
    "CacheConfig",
    "CompileConfig",
    "ModelConfig",
    "FORMATS",
]

# Weight formats of a model's versions (see pool.loader for how each is read).
FORMATS = ("torchscript", "safetensors", "torch_export", "onnx")

# Wire dtype names (Triton / KServe v2 spelling) -> numpy dtype names.
DTYPES: dict[str, str] = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}


class TensorSpec(BaseModel):
    """One input or output tensor. ``shape`` excludes the batch dimension; -1 = variable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1, description="Tensor name as callers send it.")
    dtype: str = Field(..., description=f"One of {', '.join(DTYPES)}.")
    shape: tuple[int, ...] = Field(..., description="Per-item shape; -1 marks a variable dim.")

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype(cls, v: Any) -> str:
        s = str(v).upper()
        if s not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {v!r}")
        return s

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        bad = [d for d in v if d == 0 or d < -1]
        if bad:
            raise ValueError(f"shape dims must be positive or -1, got {list(v)}")
        return v

    @property
    def numpy_dtype(self) -> str:
        return DTYPES[self.dtype]


class CacheConfig(BaseModel):
    """Result-cache policy of one model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["none", "exact", "semantic"] = Field("exact", description="Cache mode.")
    ttl_s: float = Field(300.0, gt=0, description="Time to live of a cached answer.")
    max_value_bytes: int = Field(1 << 20, gt=0,
                                 description="Answers larger than this are not cached.")
    similarity_threshold: float | None = Field(
        None, ge=0, le=1, description="Semantic tier threshold; the app default when omitted."
    )


class CompileConfig(BaseModel):
    """``compile:`` of a model: ``torch.compile`` each version once, when it is loaded.

    Inductor's cache directory is an app setting (``compile_cache_dir``), shared by the replicas
    of a machine and kept across restarts, so a warm start reuses the compiled kernels.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["default", "reduce-overhead", "max-autotune"] = Field(
        "default", description="torch.compile mode.")
    dynamic: bool = Field(True, description="Compile for dynamic batch sizes (one graph for all "
                          "sizes) instead of one specialisation per size seen.")


class ModelConfig(BaseModel):
    """Configuration of one model (all versions share it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1, description="Model name; must match its folder.")
    inputs: tuple[TensorSpec, ...] = Field(..., min_length=1, description="Input tensors.")
    outputs: tuple[TensorSpec, ...] = Field(..., min_length=1, description="Output tensors.")
    max_batch_size: int = Field(32, ge=1, le=65536, description="Largest batch run at once.")
    batch_wait_ms: float = Field(2.0, ge=0, le=10_000,
                                 description="How long to wait to fill a batch.")
    priority: Priority = Field(Priority.INTERACTIVE, description="Default priority class.")
    device: Literal["gpu", "cpu", "any"] = Field("any", description="Where the model may run.")
    deadline_ms: float | None = Field(None, gt=0, description="Default deadline for its requests.")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="Result cache policy.")
    fallback: tuple[FallbackStep, ...] = Field((), description="Fallback chain, tried in order.")
    format: Literal["torchscript", "safetensors", "torch_export", "onnx"] = Field(
        "torchscript", description="Weight format of its versions: model.pt (TorchScript), "
        "model.safetensors (+ architecture), model.pt2 (torch.export.save) or model.onnx.")
    compile: CompileConfig | None = Field(
        None, description="torch.compile each version at load (safetensors, torch_export).")
    warmup_batch_sizes: tuple[int, ...] | None = Field(
        None, description="Batch sizes the load-time warm-up runs; default [1], and "
        "[1, max_batch_size] for a compiled model.")
    architecture: str | None = Field(
        None, description="For safetensors: 'module:factory' building the nn.Module."
    )
    architecture_kwargs: dict[str, Any] = Field(default_factory=dict, description="Factory kwargs.")
    max_input_bytes: int = Field(16 << 20, gt=0, description="Largest accepted request payload.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form (accuracy...).")

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, v: Any) -> Priority:
        return parse_priority(v)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        names = [t.name for t in self.inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"input names must be unique, got {names}")
        if self.format == "safetensors" and not self.architecture:
            raise ValueError("format=safetensors needs 'architecture' ('module:factory')")
        if self.compile is not None and self.format in ("onnx", "torchscript"):
            raise ValueError(f"compile: applies to format safetensors or torch_export, not "
                             f"{self.format} (its runtime optimises the graph itself)")
        bad = [b for b in self.warmup_batch_sizes or () if not 1 <= b <= self.max_batch_size]
        if bad:
            raise ValueError(f"warmup_batch_sizes must lie in 1..max_batch_size "
                             f"({self.max_batch_size}), got {bad}")
        return self

    @property
    def warmup_sizes(self) -> tuple[int, ...]:
        """Batch sizes the load-time warm-up runs."""
        if self.warmup_batch_sizes:
            return self.warmup_batch_sizes
        return (1, self.max_batch_size) if self.compile is not None else (1,)

    def input(self, name: str) -> TensorSpec | None:
        return next((t for t in self.inputs if t.name == name), None)
