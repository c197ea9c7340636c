"""Timeshare's front door: request/response schemas, typed errors, the handle client, settings.

``from router import InferenceRequest, TimeshareClient`` works; names resolve lazily, so
importing a Ray-free part of the package (``router.v2``, ``router.pipeline``) never imports Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CacheControl": "router.schemas",
    "InferenceRequest": "router.schemas",
    "InferenceResponse": "router.schemas",
    "RouteInfo": "router.schemas",
    "Timings": "router.schemas",
    "ANONYMOUS": "router.schemas",
    "TimeshareClient": "router.client",
    "TimeshareError": "router.errors",
    "InvalidRequest": "router.errors",
    "ModelNotFound": "router.errors",
    "PayloadTooLarge": "router.errors",
    "Unauthorized": "router.errors",
    "Forbidden": "router.errors",
    "QuotaExceeded": "router.errors",
    "ServiceUnavailable": "router.errors",
    "DeadlineExceeded": "router.errors",
    "AppSettings": "router.settings",
    "load_settings": "router.settings",
    "Pipeline": "router.pipeline",
    "PipelineConfig": "router.pipeline",
    "build_app": "router.app",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'router' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
