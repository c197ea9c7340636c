"""Alert events: labels, annotations, severity, environment, fingerprint, firing/resolved.

An :class:`Alert` is immutable. Its identity is its label set (the fingerprint is the
Prometheus/Alertmanager FNV-1a 64-bit label-set hash, so fingerprints match what those tools
show). ``severity`` and ``environment`` live in the labels (``severity``, ``env``) so routes,
inhibition rules and silences can match on them.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

__all__ = [
    "ENVIRONMENTS",
    "ENV_LABEL",
    "SEVERITY_LABEL",
    "Alert",
    "AlertStatus",
    "Severity",
    "fingerprint",
    "format_time",
    "parse_severity",
]

SEVERITY_LABEL = "severity"
ENV_LABEL = "env"
ENVIRONMENTS = ("test", "staging", "prod")

_FNV_OFFSET = 14695981039346656037
_FNV_PRIME = 1099511628211
_MASK = (1 << 64) - 1
_SEP = 0xFF  # Prometheus model.SeparatorByte


class Severity(str, enum.Enum):
    """P1 page now · P2 page, urgent · P3 team channel · P4 log/digest. P1 is the most severe."""

    P1 = "P1"
    P2 = "P2"
    P3 = "P3"
    P4 = "P4"

    @property
    def rank(self) -> int:
        """1 for P1 ... 4 for P4 (lower = more severe)."""
        return int(self.value[1])

    @property
    def pagerduty(self) -> str:
        """PagerDuty Events v2 severity: critical, error, warning, info."""
        return ("critical", "error", "warning", "info")[self.rank - 1]

    def cap(self, ceiling: Severity) -> Severity:
        """This severity, made no more severe than ``ceiling`` (P1 capped at P3 -> P3)."""
        return self if self.rank >= ceiling.rank else ceiling


def parse_severity(value: Severity | str) -> Severity:
    """``"p1"``/``"P1"``/``Severity.P1`` -> ``Severity.P1``; anything else raises ValueError."""
    if isinstance(value, Severity):
        return value
    try:
        return Severity(str(value).strip().upper())
    except ValueError:
        raise ValueError(
            f"severity must be one of {', '.join(s.value for s in Severity)}, got {value!r}"
        ) from None


class AlertStatus(str, enum.Enum):
    """Alertmanager's two alert states."""

    FIRING = "firing"
    RESOLVED = "resolved"


def _fnv_add(h: int, data: bytes) -> int:
    for b in data:
        h ^= b
        h = (h * _FNV_PRIME) & _MASK
    return h


def fingerprint(labels: Mapping[str, str]) -> str:
    """Prometheus label-set fingerprint: FNV-1a 64 over sorted ``name 0xff value 0xff``, hex."""
    h = _FNV_OFFSET
    for name in sorted(labels):
        h = _fnv_add(h, name.encode())
        h = _fnv_add(h, bytes([_SEP]))
        h = _fnv_add(h, str(labels[name]).encode())
        h = _fnv_add(h, bytes([_SEP]))
    return f"{h:016x}"


def format_time(ts: float | None) -> str:
    """RFC 3339 UTC; ``None`` -> Go's zero time, as Alertmanager writes an unset ``endsAt``."""
    if ts is None:
        return "0001-01-01T00:00:00Z"
    return datetime.fromtimestamp(ts, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _frozen_map(m: Mapping[str, Any] | None) -> Mapping[str, str]:
    return types.MappingProxyType({str(k): str(v) for k, v in (m or {}).items()})


@dataclass(frozen=True, slots=True, eq=True)
class Alert:
    """One alert. Firing while ``ends_at`` is unset or in the future, resolved after.

    Build one with :meth:`create`::

        Alert.create("ModelDown", Severity.P1, "prod", labels={"model": "digits"},
                     annotations={"summary": "digits fails"}, starts_at=clock())
    """

    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    starts_at: float = 0.0
    ends_at: float | None = None
    generator_url: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _frozen_map(self.labels))
        object.__setattr__(self, "annotations", _frozen_map(self.annotations))
        if "alertname" not in self.labels or not self.labels["alertname"]:
            raise ValueError("alert labels must include a non-empty 'alertname'")
        sev = self.labels.get(SEVERITY_LABEL)
        if sev is not None:
            parse_severity(sev)  # validates

    @classmethod
    def create(
        cls,
        name: str,
        severity: Severity | str,
        environment: str,
        *,
        labels: Mapping[str, Any] | None = None,
        annotations: Mapping[str, Any] | None = None,
        starts_at: float,
        ends_at: float | None = None,
        generator_url: str = "",
    ) -> Alert:
        """An alert named ``name`` with ``severity`` and ``env`` labels set."""
        if environment not in ENVIRONMENTS:
            raise ValueError(
                f"environment must be one of {', '.join(ENVIRONMENTS)}, got {environment!r}"
            )
        full = dict(labels or {})
        full.update(alertname=name, severity=parse_severity(severity).value, env=environment)
        return cls(full, annotations or {}, starts_at, ends_at, generator_url)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Alert:
        """Inverse of :meth:`to_dict` (used across Ray handles and by Redis state)."""
        unknown = set(data) - {"labels", "annotations", "starts_at", "ends_at", "generator_url"}
        if unknown:
            raise ValueError(f"unknown alert field(s): {', '.join(sorted(unknown))}")
        if "labels" not in data:
            raise ValueError("alert field 'labels' is required")
        return cls(
            labels=data["labels"],
            annotations=data.get("annotations") or {},
            starts_at=float(data.get("starts_at") or 0.0),
            ends_at=None if data.get("ends_at") is None else float(data["ends_at"]),
            generator_url=str(data.get("generator_url") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (picklable, JSON-able)."""
        return {
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "generator_url": self.generator_url,
        }

    @property
    def name(self) -> str:
        return self.labels["alertname"]

    @property
    def fingerprint(self) -> str:
        """Stable identity of the label set (see :func:`fingerprint`)."""
        return fingerprint(self.labels)

    @property
    def severity(self) -> Severity:
        """Severity label (``P4`` when absent)."""
        return parse_severity(self.labels.get(SEVERITY_LABEL, "P4"))

    @property
    def environment(self) -> str | None:
        return self.labels.get(ENV_LABEL)

    def resolved_at(self, now: float) -> bool:
        """True when the alert has ended at or before ``now``."""
        return self.ends_at is not None and self.ends_at <= now

    def status(self, now: float) -> AlertStatus:
        return AlertStatus.RESOLVED if self.resolved_at(now) else AlertStatus.FIRING

    def resolve(self, at: float) -> Alert:
        """A copy that ends at ``at``."""
        return replace(self, ends_at=at)

    def with_labels(self, **labels: str) -> Alert:
        """A copy with labels added or replaced (the fingerprint changes accordingly)."""
        merged = dict(self.labels)
        merged.update(labels)
        return replace(self, labels=merged)

    def with_annotations(self, **annotations: str) -> Alert:
        merged = dict(self.annotations)
        merged.update(annotations)
        return replace(self, annotations=merged)
