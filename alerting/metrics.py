"""What alert rules evaluate: a snapshot of cumulative counters and current gauges.

Its own module so the rule kinds (``alerting._private.rule_kinds``) and the evaluator
(``alerting.rules``) both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["MetricsSnapshot", "ModelCounters"]


@dataclass(frozen=True, slots=True)
class ModelCounters:
    """Cumulative request outcomes of one model (or route) since process start."""

    requests: int = 0
    errors: int = 0
    degraded: int = 0
    shed: int = 0
    slow: int = 0  # requests slower than the model's latency SLO


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """What the rules look at, at time ``at`` (epoch seconds). Counters are cumulative."""

    at: float
    models: Mapping[str, ModelCounters] = field(default_factory=dict)
    replica_restarts: int = 0
    swaps: int = 0
    open_breakers: frozenset[str] = frozenset()  # "model@pool"
    # models with a failed or refused config or version -> why (file, field, reason)
    failed_models: Mapping[str, str] = field(default_factory=dict)
    device_memory_used: Mapping[str, float] = field(default_factory=dict)  # device -> 0..1
    cache_tiers_down: frozenset[str] = frozenset()  # e.g. "redis", "semantic"
    failing_channels: frozenset[str] = frozenset()  # channel names
    quota_stores_down: frozenset[str] = frozenset()  # "redis": caller quotas decided locally
