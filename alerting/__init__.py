"""Timeshare alerting: alert events, rules over telemetry, an Alertmanager-style notification
engine, on-call channels, the alerter core and telemetry.

Ray-free except :mod:`alerting.deployment` (import it explicitly for the Serve adapter).
"""

from alerting.alerter import Alerter
from alerting.channels import (
    CHANNEL_TYPES,
    DingTalkChannel,
    FeishuChannel,
    LogChannel,
    PagerDutyChannel,
    SlackChannel,
    WebhookChannel,
    WeComChannel,
    build_channel,
)
from alerting.clock import Clock, FakeClock, SystemClock
from alerting.config import AlertingConfig, EnvironmentPolicy, default_policy, load_config
from alerting.delivery import Channel, ChannelStats, DeliveryResult
from alerting.engine import EngineFull, NotificationEngine
from alerting.events import Alert, AlertStatus, Severity, fingerprint, parse_severity
from alerting.matchers import Matcher, parse_matcher
from alerting.metrics import MetricsSnapshot, ModelCounters
from alerting.notification import Notification
from alerting.rules import RuleEvaluator
from alerting.rules_config import RulesConfig
from alerting.silences import Silence, Silences
from alerting.telemetry import Telemetry

__all__ = [
    "CHANNEL_TYPES",
    "Alert",
    "AlertStatus",
    "Alerter",
    "AlertingConfig",
    "Channel",
    "ChannelStats",
    "Clock",
    "DeliveryResult",
    "DingTalkChannel",
    "EngineFull",
    "EnvironmentPolicy",
    "FakeClock",
    "FeishuChannel",
    "LogChannel",
    "Matcher",
    "MetricsSnapshot",
    "ModelCounters",
    "Notification",
    "NotificationEngine",
    "PagerDutyChannel",
    "RuleEvaluator",
    "RulesConfig",
    "Severity",
    "Silence",
    "Silences",
    "SlackChannel",
    "SystemClock",
    "Telemetry",
    "WeComChannel",
    "WebhookChannel",
    "build_channel",
    "default_policy",
    "fingerprint",
    "load_config",
    "parse_matcher",
    "parse_severity",
]
