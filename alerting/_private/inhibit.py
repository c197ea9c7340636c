"""Inhibition: a firing source alert mutes target alerts that share the ``equal`` labels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from alerting.config import InhibitRuleConfig
from alerting.events import Alert
from alerting.matchers import Matcher, matches_all, parse_matchers


@dataclass(frozen=True, slots=True)
class InhibitRule:
    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...]

    @classmethod
    def from_config(cls, cfg: InhibitRuleConfig) -> InhibitRule:
        return cls(
            parse_matchers(cfg.source_matchers),
            parse_matchers(cfg.target_matchers),
            tuple(cfg.equal),
        )


def inhibited(alert: Alert, firing: Iterable[Alert], rules: Iterable[InhibitRule]) -> bool:
    """True when some rule targets ``alert`` and a different firing source matches it."""
    sources = list(firing)
    fp = alert.fingerprint
    for rule in rules:
        if not matches_all(rule.target, alert.labels):
            continue
        for src in sources:
            if src.fingerprint == fp or not matches_all(rule.source, src.labels):
                continue
            if all(src.labels.get(k, "") == alert.labels.get(k, "") for k in rule.equal):
                return True
    return False
