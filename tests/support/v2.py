"""Open Inference Protocol (v2) request bodies for the demo models."""

from __future__ import annotations

from typing import Any

__all__ = ["PIXELS", "digits_body"]

PIXELS = [0.0] * 64


def digits_body(data: list | None = None, shape: tuple[int, ...] = (1, 64), datatype: str = "FP32",
                **params: Any) -> dict[str, Any]:
    """A v2 body for the digits models: one ``pixels`` tensor (zeros unless ``data``), with
    ``params`` as the request's parameters."""
    doc: dict[str, Any] = {"inputs": [{"name": "pixels", "shape": list(shape),
                                       "datatype": datatype,
                                       "data": PIXELS if data is None else data}]}
    if params:
        doc["parameters"] = params
    return doc
