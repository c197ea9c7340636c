"""What the degradation code sees of a request: inputs, optional text, identity."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from policies.priority import Priority

__all__ = ["FallbackRequest", "as_outputs"]


@dataclass(slots=True)  # not frozen: built per request, 5x cheaper (docs/PERFORMANCE.md)
class FallbackRequest:
    """The parts of an ``InferenceRequest`` that fallback steps use (built by the router)."""

    model: str
    inputs: Mapping[str, np.ndarray]
    version: str | None = None
    text: str | None = None
    priority: Priority = Priority.INTERACTIVE
    caller: str = "anonymous"
    request_id: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def as_outputs(value: Any, *, where: str) -> dict[str, np.ndarray]:
    """Convert ``{name: array-like}`` to ``{name: np.ndarray}``; ``ValueError`` names the output."""
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"{where}: expected a non-empty mapping of output name to array")
    out: dict[str, np.ndarray] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: output names must be non-empty strings, got {name!r}")
        try:
            arr = np.asarray(v)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{where}.{name}: not a rectangular array ({e})") from None
        if arr.dtype == object:
            raise ValueError(f"{where}.{name}: not a rectangular array of numbers or strings")
        arr.setflags(write=False)  # shared by every answer of this rule
        out[name] = arr
    return out
