"""A notification: one group's alerts for one receiver, as the engine decided to send it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from alerting.events import Alert, AlertStatus, Severity

__all__ = ["Notification"]


def _common(maps: list[Mapping[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


@dataclass(frozen=True, slots=True)
class Notification:
    """What a receiver is told. ``at`` is when the engine flushed the group."""

    receiver: str
    group_key: str
    group_labels: Mapping[str, str]
    alerts: tuple[Alert, ...]
    at: float
    test: bool = field(default=False, compare=False)

    @property
    def firing(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if not a.resolved_at(self.at))

    @property
    def resolved(self) -> tuple[Alert, ...]:
        return tuple(a for a in self.alerts if a.resolved_at(self.at))

    @property
    def status(self) -> AlertStatus:
        """``firing`` if any alert still fires, else ``resolved``."""
        return AlertStatus.FIRING if self.firing else AlertStatus.RESOLVED

    @property
    def common_labels(self) -> dict[str, str]:
        return _common([a.labels for a in self.alerts])

    @property
    def common_annotations(self) -> dict[str, str]:
        return _common([a.annotations for a in self.alerts])

    @property
    def severity(self) -> Severity:
        """Most severe severity among firing alerts (all alerts when resolved)."""
        pool = self.firing or self.alerts
        return min((a.severity for a in pool), key=lambda s: s.rank, default=Severity.P4)

    @property
    def group_key_hash(self) -> str:
        """SHA-256 hex of the group key (Alertmanager's PagerDuty dedup key)."""
        return hashlib.sha256(self.group_key.encode()).hexdigest()

    def title(self) -> str:
        """One-line summary, e.g. ``[FIRING:2] ModelDown (P1 prod)``."""
        cl = self.common_labels
        n = len(self.firing) if self.status is AlertStatus.FIRING else len(self.alerts)
        name = cl.get("alertname") or ", ".join(sorted({a.name for a in self.alerts}))
        extra = " ".join(v for v in (self.severity.value, cl.get("env", "")) if v)
        prefix = "[TEST] " if self.test else ""
        return f"{prefix}[{self.status.value.upper()}:{n}] {name} ({extra})"

    def lines(self) -> list[str]:
        """One line per alert: status, labels that are not common, and the summary."""
        common = self.common_labels
        out = []
        for a in self.alerts:
            own = ", ".join(f"{k}={v}" for k, v in sorted(a.labels.items()) if k not in common)
            summary = a.annotations.get("summary") or a.annotations.get("description") or a.name
            st = "RESOLVED" if a.resolved_at(self.at) else "FIRING"
            out.append(f"{st} {summary}" + (f" [{own}]" if own else ""))
        return out
