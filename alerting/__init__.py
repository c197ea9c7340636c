"""Timeshare alerting: alert events, rules over telemetry, an Alertmanager-style notification
engine, on-call channels, the alerter core and telemetry. Ray-free except ``alerting.deployment``."""

from alerting.clock import Clock, FakeClock, SystemClock
from alerting.config import AlertingConfig, load_config
from alerting.engine import NotificationEngine
from alerting.events import Alert, AlertStatus, Severity, fingerprint
from alerting.matchers import Matcher, parse_matcher
from alerting.notification import Notification
from alerting.silences import Silence, Silences

__all__ = [
    "Alert",
    "AlertStatus",
    "AlertingConfig",
    "Clock",
    "FakeClock",
    "Matcher",
    "Notification",
    "NotificationEngine",
    "Severity",
    "Silence",
    "Silences",
    "SystemClock",
    "fingerprint",
    "load_config",
    "parse_matcher",
]
