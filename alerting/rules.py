"""Alert rules over telemetry: a periodic evaluator with ``for`` durations and resolution.

The pipeline builds a :class:`MetricsSnapshot` (cumulative counters and current gauges) and calls
:meth:`RuleEvaluator.evaluate` every evaluation interval; it returns the alerts to submit. A
condition must hold for the rule's ``for`` duration (pending) before its alert fires; firing
alerts are re-sent at each evaluation (the engine de-duplicates them) and a resolved alert is
emitted once when the condition clears. History is bounded (see ``RuleEvaluator``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from alerting._private.rule_kinds import RULES, Condition, Rule
from alerting.events import Alert
from alerting.metrics import MetricsSnapshot, ModelCounters
from alerting.rules_config import RulesConfig

__all__ = ["Condition", "MetricsSnapshot", "ModelCounters", "RuleEvaluator"]


@dataclass(slots=True)
class _State:
    since: float  # when the condition started holding (Prometheus activeAt)
    firing: bool = False
    last: Alert | None = None


class RuleEvaluator:
    """Evaluates every enabled built-in rule of ``config`` over successive snapshots.

    Bounds: keeps at most ``max_history`` snapshots, and none older than the longest rule window
    (plus one older one as the window's base). Rule instances are bounded by the label values
    seen in snapshots (models, devices, breakers...).
    """

    def __init__(self, config: RulesConfig, environment: str, *, max_history: int = 4096) -> None:
        self._rules: list[Rule] = [build(config) for build in RULES.values()]
        self._rules = [r for r in self._rules if r.enabled]
        self._env = environment
        self._history: collections.deque[MetricsSnapshot] = collections.deque(maxlen=max_history)
        self._horizon = max((r.horizon for r in self._rules), default=0.0)
        self._states: dict[tuple[str, tuple[tuple[str, str], ...]], _State] = {}

    def evaluate(self, snap: MetricsSnapshot) -> list[Alert]:
        """Add ``snap`` to the history and return alerts to submit (firing and newly resolved)."""
        if self._history and snap.at < self._history[-1].at:
            raise ValueError(
                f"snapshot at {snap.at} is older than the previous one ({self._history[-1].at})"
            )
        self._history.append(snap)
        while len(self._history) > 2 and self._history[1].at <= snap.at - self._horizon:
            self._history.popleft()
        now = snap.at
        seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        out: list[Alert] = []
        for rule in self._rules:
            for cond in rule.conditions(self._history):
                key = (
                    cond.name,
                    tuple(sorted({**cond.labels, "severity": cond.severity.value}.items())),
                )
                seen.add(key)
                st = self._states.setdefault(key, _State(since=now))
                if not st.firing and now - st.since >= rule.for_s:
                    st.firing = True
                if st.firing:
                    st.last = Alert.create(
                        cond.name,
                        cond.severity,
                        self._env,
                        labels=cond.labels,
                        annotations=cond.annotations,
                        starts_at=st.since,
                    )
                    out.append(st.last)
        for key in [k for k in self._states if k not in seen]:
            st = self._states.pop(key)
            if st.firing and st.last is not None:
                out.append(st.last.resolve(now))
        return out

    def pending(self) -> list[str]:
        """Names of conditions holding but not yet firing (for status pages and tests)."""
        return sorted(f"{k[0]}{dict(k[1])}" for k, s in self._states.items() if not s.firing)

    def firing(self) -> list[Alert]:
        return [s.last for s in self._states.values() if s.firing and s.last is not None]
