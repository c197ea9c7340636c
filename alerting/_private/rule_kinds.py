"""The built-in rules. Each turns the snapshot history into the conditions holding now."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from alerting.events import Severity
from alerting.metrics import MetricsSnapshot
from alerting.rules_config import RulesConfig, RuleSettings


@dataclass(frozen=True, slots=True)
class Condition:
    """A rule condition that holds now, with the alert it would raise."""

    name: str
    severity: Severity
    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)


def _base(history: Sequence[MetricsSnapshot], window: float) -> MetricsSnapshot:
    """Newest snapshot at least ``window`` old, else the oldest one we have."""
    now = history[-1].at
    base = history[0]
    for s in history:
        if s.at <= now - window:
            base = s
        else:
            break
    return base


def _delta(new: float, old: float) -> float:
    return new - old if new >= old else new  # a counter reset: count from zero


def _fmt_window(seconds: float) -> str:
    return (
        f"{seconds / 3600:g}h"
        if seconds >= 3600
        else f"{seconds / 60:g}m"
        if seconds >= 60
        else f"{seconds:g}s"
    )


class Rule:
    """Base: a name, settings, and :meth:`conditions`. ``horizon`` = history it needs."""

    name: str = ""

    def __init__(self, enabled: bool, for_s: float, horizon: float) -> None:
        self.enabled, self.for_s, self.horizon = enabled, for_s, horizon

    def conditions(self, history: Sequence[MetricsSnapshot]) -> list[Condition]:
        raise NotImplementedError


class RatioRule(Rule):
    """Share of a model's requests (errors, degraded, shed) over a window above a threshold."""

    def __init__(self, name: str, what: str, s: RuleSettings, min_requests: int) -> None:
        super().__init__(s.enabled, s.for_, s.window)
        self.name, self.what, self.s, self.min_requests = name, what, s, min_requests

    def conditions(self, history):
        latest, base = history[-1], _base(history, self.s.window)
        out = []
        for model, c in sorted(latest.models.items()):
            b = base.models.get(model)
            reqs = _delta(c.requests, b.requests if b else 0)
            part = _delta(getattr(c, self.what), getattr(b, self.what) if b else 0)
            if reqs < max(1, self.min_requests):
                continue
            share = part / reqs
            if share > self.s.threshold:
                out.append(
                    Condition(
                        self.name,
                        self.s.severity,
                        {"model": model},
                        {
                            "summary": f"{self.what} share {share:.1%} over "
                            f"{_fmt_window(self.s.window)} for model "
                            f"{model} (threshold {self.s.threshold:.1%})",
                        },
                    )
                )
        return out


class LatencyBurnRule(Rule):
    """Multi-window burn rate of the latency SLO (slow requests vs the error budget)."""

    name = "TimeshareLatencySLOBurn"

    def __init__(self, cfg: RulesConfig) -> None:
        s = cfg.latency_slo
        super().__init__(s.enabled, s.for_, max((w.long for w in s.windows), default=0.0))
        self.s, self.min_requests = s, cfg.min_requests
        self.windows = sorted(s.windows, key=lambda w: w.severity.rank)

    def _burn(self, history, model: str, window: float) -> tuple[float, float]:
        latest, base = history[-1], _base(history, window)
        c, b = latest.models[model], base.models.get(model)
        reqs = _delta(c.requests, b.requests if b else 0)
        slow = _delta(c.slow, b.slow if b else 0)
        return (slow / reqs / (1 - self.s.objective) if reqs else 0.0), reqs

    def conditions(self, history):
        out = []
        for model in sorted(history[-1].models):
            for w in self.windows:  # most severe pair first; report only that one
                long_burn, reqs = self._burn(history, model, w.long)
                short_burn, _ = self._burn(history, model, w.short)
                if (
                    reqs >= max(1, self.min_requests)
                    and long_burn >= w.burn_rate
                    and short_burn >= w.burn_rate
                ):
                    out.append(
                        Condition(
                            self.name,
                            w.severity,
                            {"model": model},
                            {
                                "summary": f"model {model} burns its latency budget "
                                f"{long_burn:.1f}x over {_fmt_window(w.long)} and "
                                f"{short_burn:.1f}x over {_fmt_window(w.short)}",
                            },
                        )
                    )
                    break
        return out


class SetRule(Rule):
    """One alert per member of a set-valued snapshot field (open breakers, failed models...).

    A mapping-valued field (failed models -> why) adds each member's value to its summary."""

    def __init__(self, name: str, attr: str, label: str, s: RuleSettings, text: str) -> None:
        super().__init__(s.enabled, s.for_, 0.0)
        self.name, self.attr, self.label, self.s, self.text = name, attr, label, s, text

    def conditions(self, history):
        members = getattr(history[-1], self.attr)
        detail = members if isinstance(members, Mapping) else {}
        return [
            Condition(self.name, self.s.severity, {self.label: m},
                      {"summary": self.text.format(m) + (f": {detail[m]}" if detail.get(m)
                                                          else "")})
            for m in sorted(members)
        ]


class IncreaseRule(Rule):
    """A global counter's increase (``per_second``: its rate) over a window above a threshold."""

    def __init__(
        self, name: str, attr: str, s: RuleSettings, *, per_second: bool, text: str
    ) -> None:
        super().__init__(s.enabled, s.for_, s.window)
        self.name, self.attr, self.s, self.per_second, self.text = name, attr, s, per_second, text

    def conditions(self, history):
        latest, base = history[-1], _base(history, self.s.window)
        inc = _delta(getattr(latest, self.attr), getattr(base, self.attr))
        span = latest.at - base.at
        value = (inc / span if span > 0 else 0.0) if self.per_second else inc
        if value < self.s.threshold or (self.per_second and span <= 0) or inc == 0:
            return []
        return [
            Condition(
                self.name,
                self.s.severity,
                {},
                {"summary": self.text.format(value, _fmt_window(self.s.window))},
            )
        ]


class MemoryPressureRule(Rule):
    name = "TimeshareDeviceMemoryPressure"

    def __init__(self, s: RuleSettings) -> None:
        super().__init__(s.enabled, s.for_, 0.0)
        self.s = s

    def conditions(self, history):
        return [
            Condition(
                self.name,
                self.s.severity,
                {"device": d},
                {
                    "summary": f"device {d} memory {used:.0%} used "
                    f"(threshold {self.s.threshold:.0%})"
                },
            )
            for d, used in sorted(history[-1].device_memory_used.items())
            if used >= self.s.threshold
        ]


RULES: dict[str, Callable[[RulesConfig], Rule]] = {
    "error_rate": lambda c: RatioRule("TimeshareErrorRate", "errors", c.error_rate, c.min_requests),
    "latency_slo": LatencyBurnRule,
    "degraded_share": lambda c: RatioRule(
        "TimeshareDegradedShare", "degraded", c.degraded_share, c.min_requests
    ),
    "shed_share": lambda c: RatioRule(
        "TimeshareRequestsShed", "shed", c.shed_share, c.min_requests
    ),
    "breaker_open": lambda c: SetRule(
        "TimeshareBreakerOpen",
        "open_breakers",
        "breaker",
        c.breaker_open,
        "circuit breaker {} is open",
    ),
    "model_load_failure": lambda c: SetRule(
        "TimeshareModelLoadFailed",
        "failed_models",
        "model",
        c.model_load_failure,
        "model {} has a failed or refused config or version",
    ),
    "replica_restarts": lambda c: IncreaseRule(
        "TimeshareReplicaRestarts",
        "replica_restarts",
        c.replica_restarts,
        per_second=False,
        text="{:g} replica restarts over {}",
    ),
    "swap_thrashing": lambda c: IncreaseRule(
        "TimeshareSwapThrashing",
        "swaps",
        c.swap_thrashing,
        per_second=True,
        text="{:.2f} swaps/s over {}",
    ),
    "device_memory_pressure": lambda c: MemoryPressureRule(c.device_memory_pressure),
    "cache_tier_down": lambda c: SetRule(
        "TimeshareCacheTierDown",
        "cache_tiers_down",
        "tier",
        c.cache_tier_down,
        "cache tier {} is down",
    ),
    "quota_store_down": lambda c: SetRule(
        "TimeshareQuotaStoreDown",
        "quota_stores_down",
        "store",
        c.quota_store_down,
        "quota store {} is down: caller rate limits are per ingress replica",
    ),
    "channel_failing": lambda c: SetRule(
        "TimeshareAlertChannelFailing",
        "failing_channels",
        "channel",
        c.channel_failing,
        "alert channel {} is failing",
    ),
}
