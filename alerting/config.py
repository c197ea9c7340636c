"""Pydantic configuration of alerting: environment, route tree, receivers, inhibition, rules.

Unknown keys are errors that name the key (``extra="forbid"`` everywhere). Durations accept
seconds or strings such as ``"30s"``, ``"5m"``, ``"4h"``. Secrets are given inline or by the name
of an environment variable (``*_env`` fields), resolved once when channels are built.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from alerting._private.duration import Duration
from alerting.events import ENVIRONMENTS, Severity
from alerting.matchers import parse_matchers
from alerting.rules_config import RulesConfig

__all__ = [
    "AlertingConfig",
    "ChannelConfig",
    "DeliveryConfig",
    "DingTalkChannelConfig",
    "EnvironmentPolicy",
    "FeishuChannelConfig",
    "InhibitRuleConfig",
    "LogChannelConfig",
    "PagerDutyChannelConfig",
    "ReceiverConfig",
    "RouteConfig",
    "SlackChannelConfig",
    "WeComChannelConfig",
    "WebhookChannelConfig",
    "default_policy",
    "load_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _check_matchers(v: list[str]) -> list[str]:
    parse_matchers(v)  # raises ValueError naming the bad matcher
    return v


class RouteConfig(_Strict):
    """A node of the routing tree (Alertmanager ``route``). Unset fields inherit from the parent."""

    receiver: str | None = Field(None, description="Receiver name; inherited when unset.")
    matchers: list[str] = Field(default_factory=list, description="e.g. ['severity=~\"P1|P2\"'].")
    group_by: list[str] | None = Field(
        None, description="Labels to group by; ['...'] = all labels."
    )
    group_wait: Duration | None = Field(
        None, description="Wait before the first notification of a group."
    )
    group_interval: Duration | None = Field(
        None, description="Wait between notifications of a group about new alerts."
    )
    repeat_interval: Duration | None = Field(
        None, description="Wait before re-sending an unchanged notification."
    )
    continue_: bool = Field(
        False, alias="continue", description="Keep matching sibling routes after this one."
    )
    routes: list[RouteConfig] = Field(
        default_factory=list, description="Child routes, tried in order."
    )

    _v_matchers = field_validator("matchers")(_check_matchers)


class DeliveryConfig(_Strict):
    """Delivery bounds of one channel."""

    queue_size: int = Field(
        256, ge=1, description="Pending notifications kept; the oldest is dropped when full."
    )
    max_attempts: int = Field(
        5, ge=1, le=20, description="Attempts per notification (5xx/429/transport errors retry)."
    )
    backoff_initial: Duration = Field(0.5, description="First retry delay; doubles each attempt.")
    backoff_max: Duration = Field(
        30.0, description="Cap on one retry delay (also caps Retry-After)."
    )
    rate_per_s: float = Field(1.0, gt=0, description="Sustained sends per second.")
    burst: int = Field(10, ge=1, description="Sends allowed at once before the rate applies.")
    timeout_s: Duration = Field(10.0, description="HTTP timeout per attempt.")


class _ChannelBase(_Strict):
    delivery: DeliveryConfig = Field(
        default_factory=DeliveryConfig, description="Queue/retry/rate bounds."
    )


class _UrlChannel(_ChannelBase):
    url: str | None = Field(None, description="Endpoint URL.")
    url_env: str | None = Field(None, description="Environment variable holding the URL.")

    @model_validator(mode="after")
    def _one_url(self) -> _UrlChannel:
        if not self.url and not self.url_env:
            raise ValueError(f"{self.type} channel needs 'url' or 'url_env'")  # type: ignore[attr-defined]
        return self


class WebhookChannelConfig(_UrlChannel):
    """Generic webhook with Alertmanager's JSON (version 4)."""

    type: Literal["webhook"] = "webhook"
    max_alerts: int = Field(0, ge=0, description="Truncate alerts[] to this many (0 = all).")
    external_url: str = Field("", description="Put in externalURL.")


class SlackChannelConfig(_UrlChannel):
    """Slack incoming webhook."""

    type: Literal["slack"] = "slack"
    channel: str | None = Field(None, description="Override channel, e.g. '#oncall'.")
    username: str | None = Field(None, description="Override bot name.")


class _SignedChannel(_UrlChannel):
    secret: SecretStr | None = Field(None, description="Signing secret (inline).")
    secret_env: str | None = Field(
        None, description="Environment variable holding the signing secret."
    )


class FeishuChannelConfig(_SignedChannel):
    """Feishu/Lark custom bot (signed when a secret is set)."""

    type: Literal["feishu"] = "feishu"


class DingTalkChannelConfig(_SignedChannel):
    """DingTalk robot (signed when a secret is set)."""

    type: Literal["dingtalk"] = "dingtalk"
    at_mobiles: list[str] = Field(default_factory=list, description="Phone numbers to @mention.")


class WeComChannelConfig(_UrlChannel):
    """WeCom (WeChat Work) group robot, markdown messages."""

    type: Literal["wecom"] = "wecom"
    key: SecretStr | None = Field(None, description="Robot key, appended as ?key= when set.")
    key_env: str | None = Field(None, description="Environment variable holding the robot key.")


class PagerDutyChannelConfig(_ChannelBase):
    """PagerDuty Events API v2."""

    type: Literal["pagerduty"] = "pagerduty"
    url: str = Field("https://events.pagerduty.com/v2/enqueue", description="Events v2 endpoint.")
    routing_key: SecretStr | None = Field(None, description="Integration key (inline).")
    routing_key_env: str | None = Field(
        None, description="Environment variable holding the integration key."
    )
    source: str = Field("timeshare", description="payload.source.")

    @model_validator(mode="after")
    def _key(self) -> PagerDutyChannelConfig:
        if self.routing_key is None and not self.routing_key_env:
            raise ValueError("pagerduty channel needs 'routing_key' or 'routing_key_env'")
        return self


class LogChannelConfig(_ChannelBase):
    """Write notifications to the ``alerting`` logger."""

    type: Literal["log"] = "log"
    level: Literal["debug", "info", "warning", "error", "critical"] = Field(
        "warning", description="Log level."
    )


ChannelConfig = Annotated[
    WebhookChannelConfig
    | SlackChannelConfig
    | FeishuChannelConfig
    | DingTalkChannelConfig
    | WeComChannelConfig
    | PagerDutyChannelConfig
    | LogChannelConfig,
    Field(discriminator="type"),
]


class ReceiverConfig(_Strict):
    """A named receiver: one or more channels notified together."""

    name: str = Field(..., min_length=1, description="Name referenced by routes.")
    send_resolved: bool = Field(True, description="Also notify when the group's alerts resolve.")
    channels: list[ChannelConfig] = Field(
        default_factory=list, description="Channels of this receiver."
    )


class InhibitRuleConfig(_Strict):
    """Mute targets while a source alert fires with the same ``equal`` label values."""

    source_matchers: list[str] = Field(
        ..., min_length=1, description="Matchers selecting source alerts."
    )
    target_matchers: list[str] = Field(
        ..., min_length=1, description="Matchers selecting muted alerts."
    )
    equal: list[str] = Field(
        default_factory=list, description="Labels that must be equal in source and target."
    )

    _v_s = field_validator("source_matchers")(_check_matchers)
    _v_t = field_validator("target_matchers")(_check_matchers)


class EnvironmentPolicy(_Strict):
    """How loud an environment may be."""

    max_severity: Severity = Field(
        ..., description="Alerts more severe than this are downgraded to it."
    )
    page_severities: list[Severity] = Field(
        ..., description="Severities allowed to reach pager channels."
    )
    log_only: bool = Field(False, description="Replace every channel by the log channel.")


def default_policy(environment: str) -> EnvironmentPolicy:
    """prod pages P1/P2; staging is capped at P3 and never pages; test only logs."""
    if environment == "prod":
        return EnvironmentPolicy(
            max_severity=Severity.P1, page_severities=[Severity.P1, Severity.P2]
        )
    if environment == "staging":
        return EnvironmentPolicy(max_severity=Severity.P3, page_severities=[])
    return EnvironmentPolicy(max_severity=Severity.P1, page_severities=[], log_only=True)


class AlertingConfig(_Strict):
    """All alerting settings of one environment (the environment overlay's ``alerting:`` block)."""

    environment: Literal["test", "staging", "prod"] = Field(
        ..., description=f"One of {', '.join(ENVIRONMENTS)}."
    )
    route: RouteConfig = Field(..., description="Root of the routing tree; must name a receiver.")
    receivers: list[ReceiverConfig] = Field(
        ..., min_length=1, description="Receivers referenced by routes."
    )
    inhibit_rules: list[InhibitRuleConfig] = Field(
        default_factory=list, description="Inhibition rules."
    )
    rules: RulesConfig = Field(
        default_factory=RulesConfig, description="Alert rules over telemetry."
    )
    policy: EnvironmentPolicy | None = Field(
        None, description="Override the environment's default loudness."
    )
    redis_url: str | None = Field(
        None, description="Persist notification state here (in-memory when unset/unreachable)."
    )
    state_prefix: str = Field("timeshare:alerting", description="Redis key prefix.")
    state_retention: Duration = Field(
        5 * 86400.0, description="How long notification state is kept in Redis."
    )
    tick_interval: Duration = Field(1.0, description="Longest sleep of the alerter loop.")
    prometheus_port: int | None = Field(
        None, ge=1, le=65535,
        description="Serve the alerter's notification metrics (timeshare_alerts_*) for "
        "Prometheus on 127.0.0.1:PORT (the alerter runs once per application).",
    )

    @model_validator(mode="after")
    def _check(self) -> AlertingConfig:
        names = [r.name for r in self.receivers]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"receiver names must be unique, duplicated: {', '.join(dup)}")
        if not self.route.receiver:
            raise ValueError("route.receiver is required on the root route")
        for path, r in _walk(self.route, "route"):
            if r.receiver is not None and r.receiver not in names:
                raise ValueError(
                    f"{path}.receiver {r.receiver!r} is not a receiver; known: {', '.join(names)}"
                )
        return self

    def effective_policy(self) -> EnvironmentPolicy:
        """``policy`` when set, else :func:`default_policy` of ``environment``."""
        return self.policy or default_policy(self.environment)

    def receiver(self, name: str) -> ReceiverConfig:
        for r in self.receivers:
            if r.name == name:
                return r
        raise KeyError(f"no receiver {name!r}; known: {', '.join(r.name for r in self.receivers)}")


def _walk(route: RouteConfig, path: str):
    yield path, route
    for i, child in enumerate(route.routes):
        yield from _walk(child, f"{path}.routes[{i}]")


def load_config(source: str | dict[str, Any]) -> AlertingConfig:
    """Build from a dict or YAML text; a top-level ``alerting:`` key is unwrapped."""
    data = yaml.safe_load(source) if isinstance(source, str) else source
    if not isinstance(data, dict):
        raise ValueError("alerting config must be a mapping")  # noqa: TRY004 - a config error
    if "alerting" in data and "environment" not in data:
        data = data["alerting"]
    return AlertingConfig.model_validate(data)
