"""Runs a validated rule list against a request: first match wins."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.trust import ModuleAllowlist
from fallbacks.request import FallbackRequest, as_outputs
from fallbacks.rules import CallableRule, load_rules

__all__ = ["RuleEngine", "RuleMatch"]

log = logging.getLogger(__name__)

# Callables run here. A callable that never returns keeps its worker forever (Python threads
# cannot be killed); the bound keeps such leaks from growing: once all workers are stuck, later
# calls wait in the queue, time out, and count as no answer.
_MAX_CALLABLE_THREADS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_MAX_CALLABLE_THREADS, thread_name_prefix="fallback-rule")
        return _pool


@dataclass(frozen=True, slots=True)
class RuleMatch:
    """The answer of a rule set: which rule (``rule``, of type ``kind``) and its outputs."""

    rule: str
    kind: str
    outputs: Mapping[str, np.ndarray]


class RuleEngine:
    """An ordered rule list.

    >>> eng = RuleEngine.from_config([{"name": "hi", "type": "keyword", "keywords": ["hello"],
    ...                                "outputs": {"label": [1]}}])
    >>> eng.match_declarative(FallbackRequest(model="m", inputs={}, text="Hello there")).rule
    'hi'
    """

    def __init__(self, rules: Sequence[Any], *, executor: ThreadPoolExecutor | None = None):
        if not rules:
            raise ValueError("a rule engine needs at least one rule")
        self.rules = tuple(rules)
        self._executor = executor

    @classmethod
    def from_config(
        cls,
        rules: Sequence[Mapping[str, Any]] | None = None,
        *,
        callable_path: str | None = None,
        callable_timeout_ms: float = 50.0,
        where: str = "rules",
        executor: ThreadPoolExecutor | None = None,
        allow: ModuleAllowlist = ModuleAllowlist(),
    ) -> RuleEngine:
        """Validate ``rules`` (and/or one callable, tried first) into an engine.

        Raises ``RuleConfigError`` naming the rule and field.
        """
        raw: list[Mapping[str, Any]] = []
        if callable_path:
            raw.append(
                {
                    "name": callable_path,
                    "type": "callable",
                    "function": callable_path,
                    "timeout_ms": callable_timeout_ms,
                }
            )
        raw.extend(rules or ())
        return cls(load_rules(raw, where=where, allow=allow), executor=executor)

    def match_declarative(self, request: FallbackRequest) -> RuleMatch | None:
        """First matching rule, skipping callables (never blocks)."""
        for rule in self.rules:
            if isinstance(rule, CallableRule):
                continue
            m = self._try(rule, request)
            if m is not None:
                return m
        return None

    async def evaluate(
        self, request: FallbackRequest, *, budget_s: float | None = None
    ) -> RuleMatch | None:
        """First rule that answers ``request``; a callable gets min(its timeout, ``budget_s``)."""
        for rule in self.rules:
            if isinstance(rule, CallableRule):
                m = await self._call(rule, request, budget_s)
            else:
                m = self._try(rule, request)
            if m is not None:
                return m
        return None

    @staticmethod
    def _try(rule: Any, request: FallbackRequest) -> RuleMatch | None:
        try:
            out = rule.match(request)
        except Exception:  # a rule that cannot evaluate this input does not apply to it
            log.warning(
                "rule %r failed on request %s", rule.name, request.request_id, exc_info=True
            )
            return None
        return None if out is None else RuleMatch(rule.name, rule.type, out)

    async def _call(
        self, rule: CallableRule, request: FallbackRequest, budget_s: float | None
    ) -> RuleMatch | None:
        timeout = rule.timeout_ms / 1000.0
        if budget_s is not None:
            timeout = min(timeout, max(0.0, budget_s))
        loop = asyncio.get_running_loop()
        if inspect.iscoroutinefunction(rule.fn):
            aw: Any = rule.fn(request)
        else:
            aw = loop.run_in_executor(self._executor or _shared_pool(), rule.fn, request)
        try:
            result = await asyncio.wait_for(aw, timeout)
        except asyncio.TimeoutError:
            log.warning("rule callable %s timed out after %.3fs", rule.function, timeout)
            return None
        except Exception:
            log.warning("rule callable %s raised", rule.function, exc_info=True)
            return None
        if result is None:
            return None
        try:
            return RuleMatch(rule.name, rule.type, as_outputs(result, where=rule.function))
        except ValueError as e:
            log.warning("rule callable %s returned unusable outputs: %s", rule.function, e)
            return None
