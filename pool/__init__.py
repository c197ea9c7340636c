"""Timeshare pool: models and devices.

Public types are exported here; the worker, residency and memory internals live in ``_private``.
"""

from pool.class_window import ClassWindow
from pool.types import DeviceCounters, ModelKey, RoutingStats, WorkResult
from pool.work import PoolRefusal, PoolReply, PoolWork, unwrap

__all__ = [
    "ClassWindow",
    "DeviceCounters",
    "ModelKey",
    "PoolRefusal",
    "PoolReply",
    "PoolWork",
    "RoutingStats",
    "WorkResult",
    "unwrap",
]
