"""Payload builders for each channel: pure functions of a notification (no I/O)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from typing import Any

from alerting.events import format_time
from alerting.notification import Notification

FIRING_COLOR = "#d63232"
RESOLVED_COLOR = "#2eb886"


def webhook_payload(
    note: Notification, *, max_alerts: int = 0, external_url: str = ""
) -> dict[str, Any]:
    """Alertmanager webhook JSON, ``version: "4"``."""
    alerts = list(note.alerts)
    truncated = 0
    if max_alerts and len(alerts) > max_alerts:
        truncated = len(alerts) - max_alerts
        alerts = alerts[:max_alerts]
    return {
        "version": "4",
        "groupKey": note.group_key,
        "truncatedAlerts": truncated,
        "status": note.status.value,
        "receiver": note.receiver,
        "groupLabels": dict(note.group_labels),
        "commonLabels": note.common_labels,
        "commonAnnotations": note.common_annotations,
        "externalURL": external_url,
        "alerts": [
            {
                "status": a.status(note.at).value,
                "labels": dict(a.labels),
                "annotations": dict(a.annotations),
                "startsAt": format_time(a.starts_at),
                "endsAt": format_time(a.ends_at if a.resolved_at(note.at) else None),
                "generatorURL": a.generator_url,
                "fingerprint": a.fingerprint,
            }
            for a in alerts
        ],
    }


def text_body(note: Notification) -> str:
    return "\n".join([note.title(), *note.lines()])


def markdown_body(note: Notification) -> str:
    return "\n".join([f"### {note.title()}", "", *(f"- {line}" for line in note.lines())])


def slack_payload(
    note: Notification, *, channel: str | None, username: str | None
) -> dict[str, Any]:
    """Slack incoming-webhook message with one coloured attachment."""
    body: dict[str, Any] = {
        "text": note.title(),
        "attachments": [
            {
                "color": FIRING_COLOR if note.firing else RESOLVED_COLOR,
                "title": note.title(),
                "text": "\n".join(note.lines()),
                "fallback": text_body(note),
                "ts": int(note.at),
            }
        ],
    }
    if channel:
        body["channel"] = channel
    if username:
        body["username"] = username
    return body


def feishu_sign(timestamp: int, secret: str) -> str:
    """Feishu/Lark: base64(HMAC-SHA256(key="timestamp\\nsecret", msg=b""))."""
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def feishu_payload(note: Notification, *, secret: str | None, timestamp: int) -> dict[str, Any]:
    """Feishu/Lark custom-bot text message; signed when a secret is set."""
    body: dict[str, Any] = {"msg_type": "text", "content": {"text": text_body(note)}}
    if secret:
        body = {"timestamp": str(timestamp), "sign": feishu_sign(timestamp, secret), **body}
    return body


def dingtalk_sign(timestamp_ms: int, secret: str) -> str:
    """DingTalk: urlencode(base64(HMAC-SHA256(key=secret, msg="timestamp\\nsecret")))."""
    digest = hmac.new(
        secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256
    ).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode())


def dingtalk_url(url: str, *, secret: str | None, timestamp_ms: int) -> str:
    if not secret:
        return url
    sep = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{sep}timestamp={timestamp_ms}&sign={dingtalk_sign(timestamp_ms, secret)}"


def dingtalk_payload(note: Notification, *, at_mobiles: list[str]) -> dict[str, Any]:
    text = markdown_body(note)
    if at_mobiles:
        text += "\n\n" + " ".join(f"@{m}" for m in at_mobiles)
    return {
        "msgtype": "markdown",
        "markdown": {"title": note.title(), "text": text},
        "at": {"atMobiles": list(at_mobiles), "isAtAll": False},
    }


def wecom_url(url: str, *, key: str | None) -> str:
    if not key:
        return url
    sep = "&" if urllib.parse.urlsplit(url).query else "?"
    return f"{url}{sep}key={urllib.parse.quote(key)}"


def wecom_payload(note: Notification) -> dict[str, Any]:
    colour = "warning" if note.firing else "info"
    lines = [
        f'### <font color="{colour}">{note.title()}</font>',
        *(f"> {line}" for line in note.lines()),
    ]
    return {"msgtype": "markdown", "markdown": {"content": "\n".join(lines)}}


def pagerduty_payload(note: Notification, *, routing_key: str, source: str) -> dict[str, Any]:
    """Events API v2: trigger while anything fires, resolve once all resolved; dedup per group."""
    dedup = note.group_key_hash
    if not note.firing:
        return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": dedup}
    common = note.common_labels
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup,
        "client": "timeshare",
        "payload": {
            "summary": note.title()[:1024],
            "source": source,
            "severity": note.severity.pagerduty,
            "timestamp": format_time(note.at),
            "component": common.get("model", ""),
            "group": common.get("alertname", ""),
            "class": common.get("severity", ""),
            "custom_details": {
                "firing": [line for line in note.lines() if line.startswith("FIRING")],
                "num_firing": len(note.firing),
                "num_resolved": len(note.resolved),
                "group_labels": dict(note.group_labels),
            },
        },
    }
