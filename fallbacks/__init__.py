"""Graceful degradation: deadlines, circuit breakers, rules, fallback chains, retries, quotas.

Ray-free. The router integrates it through :class:`ModelExecutor` (its pool calls),
:func:`compile_chain` (at model-config load) and :meth:`ChainRunner.run` (per request); see
``fallbacks/README.md``.
"""

from fallbacks.breaker import (
    BreakerConfig,
    BreakerMetrics,
    BreakerRegistry,
    BreakerState,
    CircuitBreaker,
    StateTransition,
    TransitionListener,
)
from fallbacks.chain import (
    Attempt,
    ChainConfig,
    ChainResult,
    ChainRunner,
    CompiledStep,
    ModelAnswer,
    ModelExecutor,
    ModelReply,
    PoolName,
    Target,
    compile_chain,
)
from fallbacks.deadline import Deadline, resolve_deadline_ms
from fallbacks.errors import (
    DeadlineExceeded,
    Forbidden,
    InvalidRequest,
    ModelNotFound,
    PayloadTooLarge,
    QuotaExceeded,
    ServiceUnavailable,
    TimeshareError,
    Unauthorized,
)
from fallbacks.pool_throttle import PoolThrottled, PoolThrottles
from fallbacks.quotas import CallerLimits, CallerQuotas, QuotaConfig, QuotaLease
from fallbacks.request import FallbackRequest, as_outputs
from fallbacks.retry import RetryBudget, RetryPredicate, is_idempotent_failure, retry_call
from fallbacks.rule_engine import RuleEngine, RuleMatch
from fallbacks.rules import RuleConfigError, load_rules
from fallbacks.throttle import AdaptiveThrottle

__all__ = [
    "AdaptiveThrottle",
    "Attempt",
    "BreakerConfig",
    "BreakerMetrics",
    "BreakerRegistry",
    "BreakerState",
    "CallerLimits",
    "CallerQuotas",
    "ChainConfig",
    "ChainResult",
    "ChainRunner",
    "CircuitBreaker",
    "CompiledStep",
    "Deadline",
    "DeadlineExceeded",
    "FallbackRequest",
    "Forbidden",
    "InvalidRequest",
    "ModelExecutor",
    "ModelNotFound",
    "ModelAnswer",
    "ModelReply",
    "PayloadTooLarge",
    "PoolName",
    "PoolThrottled",
    "PoolThrottles",
    "QuotaConfig",
    "QuotaExceeded",
    "QuotaLease",
    "RetryBudget",
    "RetryPredicate",
    "RuleConfigError",
    "RuleEngine",
    "RuleMatch",
    "ServiceUnavailable",
    "StateTransition",
    "Target",
    "TimeshareError",
    "TransitionListener",
    "Unauthorized",
    "as_outputs",
    "compile_chain",
    "is_idempotent_failure",
    "load_rules",
    "resolve_deadline_ms",
    "retry_call",
]
