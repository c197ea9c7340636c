"""Pydantic settings of the alert rules over telemetry (the ``rules:`` block of the config)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from alerting._private.duration import Duration
from alerting.events import Severity

__all__ = ["BurnWindow", "LatencySloSettings", "RuleSettings", "RulesConfig"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RuleSettings(_Strict):
    """One rule: its severity, ``for`` duration (pending -> firing), threshold and window."""

    enabled: bool = Field(True, description="Evaluate this rule.")
    severity: Severity = Field(..., description="Severity of the alert it raises.")
    for_: Duration = Field(
        0.0, alias="for", description="Condition must hold this long before firing."
    )
    threshold: float = Field(
        0.0, ge=0, description="Rule-specific threshold (share, count or rate)."
    )
    window: Duration = Field(300.0, gt=0, description="Look-back window for rates and increases.")


class BurnWindow(_Strict):
    """Multi-window burn-rate pair (Google SRE workbook): both windows must burn faster than
    ``burn_rate``."""

    long: Duration = Field(..., gt=0, description="Long window, e.g. 1h.")
    short: Duration = Field(
        ..., gt=0, description="Short window, e.g. 5m (stops alerting soon after recovery)."
    )
    burn_rate: float = Field(..., gt=0, description="Budget burn multiple, e.g. 14.4.")
    severity: Severity = Field(..., description="Severity when this pair burns.")

    @model_validator(mode="after")
    def _order(self) -> BurnWindow:
        if self.short >= self.long:
            raise ValueError(
                f"short window ({self.short}s) must be shorter than long ({self.long}s)"
            )
        return self


class LatencySloSettings(_Strict):
    """p99-over-SLO burn rate: ``objective`` of requests must finish within the latency SLO."""

    enabled: bool = Field(True, description="Evaluate this rule.")
    objective: float = Field(0.99, gt=0, lt=1, description="Share of requests that must be fast.")
    for_: Duration = Field(
        0.0, alias="for", description="Condition must hold this long before firing."
    )
    windows: list[BurnWindow] = Field(
        default_factory=lambda: [
            BurnWindow(long=3600, short=300, burn_rate=14.4, severity=Severity.P1),
            BurnWindow(long=21600, short=1800, burn_rate=6.0, severity=Severity.P2),
        ],
        description="Burn-rate window pairs, most severe first.",
    )


def _rule(sev: Severity, for_s: float, threshold: float = 0.0, window: float = 300.0):
    return Field(
        default_factory=lambda: RuleSettings(
            severity=sev, for_=for_s, threshold=threshold, window=window
        )
    )


class RulesConfig(_Strict):
    """Thresholds of every built-in rule. Defaults suit prod; overlays override per environment."""

    min_requests: int = Field(
        20, ge=0, description="Ratio rules stay quiet below this many requests in the window."
    )
    error_rate: RuleSettings = _rule(Severity.P2, 120, 0.05)
    latency_slo: LatencySloSettings = Field(default_factory=LatencySloSettings)
    degraded_share: RuleSettings = _rule(Severity.P3, 300, 0.2)
    shed_share: RuleSettings = _rule(Severity.P3, 120, 0.05)
    breaker_open: RuleSettings = _rule(Severity.P2, 60)
    # A failed or refused model or version (its previous version, if any, keeps serving): the
    # team channel, with the reason, file and field in the summary.
    model_load_failure: RuleSettings = _rule(Severity.P3, 0)
    replica_restarts: RuleSettings = _rule(Severity.P3, 0, 3, 600)
    swap_thrashing: RuleSettings = _rule(Severity.P3, 300, 5.0)
    device_memory_pressure: RuleSettings = _rule(Severity.P3, 300, 0.95)
    cache_tier_down: RuleSettings = _rule(Severity.P3, 60)
    channel_failing: RuleSettings = _rule(Severity.P3, 300)
    # Quotas degrade to per-replica shares (never failing requests): worth a team message.
    quota_store_down: RuleSettings = _rule(Severity.P3, 30)

    @model_validator(mode="before")
    @classmethod
    def _merge_defaults(cls, data: Any) -> Any:
        """A partial rule block (``error_rate: {for: 5m}``) keeps the other defaults of that
        rule."""
        if not isinstance(data, dict):
            return data
        merged = dict(data)
        for name, field in cls.model_fields.items():
            given = data.get(name)
            if isinstance(given, dict) and field.default_factory is not None:
                default = field.default_factory().model_dump(by_alias=True)  # type: ignore[call-arg]
                merged[name] = {**default, **given}
        return merged
