"""Timeshare pool: models and devices.

Public types are exported here; the worker, residency and memory internals live in ``_private``.
"""

from pool.types import DeviceCounters, ModelKey, RoutingStats, WorkResult
from pool.work import PoolRefusal, PoolReply, PoolWork, unwrap

__all__ = [
    "DeviceCounters",
    "ModelKey",
    "PoolRefusal",
    "PoolReply",
    "PoolWork",
    "RoutingStats",
    "WorkResult",
    "unwrap",
]
