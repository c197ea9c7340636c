"""Open Inference Protocol (v2) request bodies for the demo models."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PIXELS", "digits_body", "iris_rows", "v2_body"]

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


def iris_rows(n: int = 1, control: float | None = None) -> np.ndarray:
    x = np.tile(np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32), (n, 1))
    if control is not None:
        x[0, 0] = control
    return x


def v2_body(name: str, x: np.ndarray, **params: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"inputs": [{"name": name, "shape": list(x.shape),
                                        "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
    if params:
        body["parameters"] = params
    return body
