"""Graceful degradation: deadlines, circuit breakers, rules, fallback chains, retries, quotas."""

from fallbacks.breaker import (
    BreakerConfig,
    BreakerMetrics,
    BreakerRegistry,
    BreakerState,
    CircuitBreaker,
    StateTransition,
    TransitionListener,
)
from fallbacks.deadline import Clock, Deadline, resolve_deadline_ms

__all__ = [
    "BreakerConfig",
    "BreakerMetrics",
    "BreakerRegistry",
    "BreakerState",
    "CircuitBreaker",
    "Clock",
    "Deadline",
    "StateTransition",
    "TransitionListener",
    "resolve_deadline_ms",
]
