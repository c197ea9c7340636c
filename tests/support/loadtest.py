"""A small load-test config for the load-test tests."""

from __future__ import annotations

from typing import Any

__all__ = ["raw_config"]


def raw_config(url: str, **over: Any) -> dict[str, Any]:
    """A small load-test config (as a YAML-ready dict) against ``url``; keys in ``over`` win."""
    raw: dict[str, Any] = {
        "name": "t",
        "target": {"url": url},
        "models": [{"name": "digits-small"}],
        "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [1, 64],
                    "random": {"low": 0, "high": 16}}],
        "arrival": {"process": "poisson", "rate": 40, "seed": 11},
        "duration_s": 2,
        "warmup_s": 0,
        "stability": {"window_s": 1, "windows": 3, "tolerance": 0.9},
        "slo": {"p99_ms": 2000, "error_rate": 0.01},
    }
    return {**raw, **over}
