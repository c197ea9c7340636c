"""On-call channels: webhook, Slack, Feishu/Lark, DingTalk, WeCom, PagerDuty, log.

Build them with :func:`build_channel` (a registry keyed by the config ``type``). Secrets are
resolved here, once, from the config or from the environment mapping passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import SecretStr

from alerting._private import formats
from alerting.config import (
    ChannelConfig,
    DingTalkChannelConfig,
    FeishuChannelConfig,
    LogChannelConfig,
    PagerDutyChannelConfig,
    SlackChannelConfig,
    WebhookChannelConfig,
    WeComChannelConfig,
)
from alerting.delivery import Channel, HttpRequest
from alerting.notification import Notification

__all__ = [
    "CHANNEL_TYPES",
    "DingTalkChannel",
    "FeishuChannel",
    "LogChannel",
    "PagerDutyChannel",
    "SlackChannel",
    "WeComChannel",
    "WebhookChannel",
    "build_channel",
    "resolve_secret",
]


def resolve_secret(
    value: SecretStr | str | None, env_name: str | None, environ: Mapping[str, str], what: str
) -> str | None:
    """Inline value, else ``environ[env_name]``; a named but unset variable is an error."""
    if value is not None:
        return value.get_secret_value() if isinstance(value, SecretStr) else value
    if env_name:
        if env_name not in environ or not environ[env_name]:
            raise ValueError(f"{what}: environment variable {env_name!r} is not set")
        return environ[env_name]
    return None


class WebhookChannel(Channel):
    """Generic webhook, Alertmanager JSON (version 4)."""

    kind = "webhook"

    def __init__(
        self, name: str, receiver: str, cfg: WebhookChannelConfig, *, url: str, **kw: Any
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self.url, self.cfg = url, cfg

    def build_request(self, note: Notification) -> HttpRequest:
        body = formats.webhook_payload(
            note, max_alerts=self.cfg.max_alerts, external_url=self.cfg.external_url
        )
        return HttpRequest(self.url, body)


class SlackChannel(Channel):
    """Slack incoming webhook."""

    kind = "slack"

    def __init__(
        self, name: str, receiver: str, cfg: SlackChannelConfig, *, url: str, **kw: Any
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self.url, self.cfg = url, cfg

    def build_request(self, note: Notification) -> HttpRequest:
        return HttpRequest(
            self.url,
            formats.slack_payload(note, channel=self.cfg.channel, username=self.cfg.username),
        )


class FeishuChannel(Channel):
    """Feishu/Lark custom bot; signs with ``timestamp`` (seconds) and ``sign`` when a secret is
    set."""

    kind = "feishu"
    _RATE_LIMITED: ClassVar[frozenset[int]] = frozenset({9499, 11232})

    def __init__(
        self,
        name: str,
        receiver: str,
        cfg: FeishuChannelConfig,
        *,
        url: str,
        secret: str | None,
        **kw: Any,
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self.url, self._secret = url, secret

    def build_request(self, note: Notification) -> HttpRequest:
        ts = int(self._clock())
        return HttpRequest(
            self.url, formats.feishu_payload(note, secret=self._secret, timestamp=ts)
        )

    def check_body(self, body: Any) -> tuple[bool, bool]:
        code = body.get("code", body.get("StatusCode", 0)) if isinstance(body, dict) else 0
        return code == 0, code in self._RATE_LIMITED


class DingTalkChannel(Channel):
    """DingTalk robot; signs with ``timestamp`` (ms) and ``sign`` query parameters."""

    kind = "dingtalk"
    _RATE_LIMITED: ClassVar[frozenset[int]] = frozenset({130101})

    def __init__(
        self,
        name: str,
        receiver: str,
        cfg: DingTalkChannelConfig,
        *,
        url: str,
        secret: str | None,
        **kw: Any,
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self.url, self._secret, self.cfg = url, secret, cfg

    def build_request(self, note: Notification) -> HttpRequest:
        ts_ms = int(self._clock() * 1000)
        url = formats.dingtalk_url(self.url, secret=self._secret, timestamp_ms=ts_ms)
        return HttpRequest(url, formats.dingtalk_payload(note, at_mobiles=self.cfg.at_mobiles))

    def check_body(self, body: Any) -> tuple[bool, bool]:
        code = body.get("errcode", 0) if isinstance(body, dict) else 0
        return code == 0, code in self._RATE_LIMITED


class WeComChannel(Channel):
    """WeCom group robot, markdown message."""

    kind = "wecom"
    _RATE_LIMITED: ClassVar[frozenset[int]] = frozenset({45009})

    def __init__(
        self,
        name: str,
        receiver: str,
        cfg: WeComChannelConfig,
        *,
        url: str,
        key: str | None,
        **kw: Any,
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self.url = formats.wecom_url(url, key=key)

    def build_request(self, note: Notification) -> HttpRequest:
        return HttpRequest(self.url, formats.wecom_payload(note))

    def check_body(self, body: Any) -> tuple[bool, bool]:
        code = body.get("errcode", 0) if isinstance(body, dict) else 0
        return code == 0, code in self._RATE_LIMITED


class PagerDutyChannel(Channel):
    """PagerDuty Events API v2: trigger/resolve, ``dedup_key`` = SHA-256 of the group key."""

    kind = "pagerduty"

    def __init__(
        self, name: str, receiver: str, cfg: PagerDutyChannelConfig, *, routing_key: str, **kw: Any
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self.url, self._key, self.cfg = cfg.url, routing_key, cfg

    def build_request(self, note: Notification) -> HttpRequest:
        return HttpRequest(
            self.url, formats.pagerduty_payload(note, routing_key=self._key, source=self.cfg.source)
        )


class LogChannel(Channel):
    """Writes notifications to the ``alerting`` logger; keeps the last ``keep`` lines for status."""

    kind = "log"

    def __init__(
        self, name: str, receiver: str, cfg: LogChannelConfig, *, keep: int = 100, **kw: Any
    ) -> None:
        super().__init__(name, receiver, cfg.delivery, **kw)
        self._level = logging.getLevelName(cfg.level.upper())
        self.lines: list[str] = []
        self._keep = keep

    def build_request(self, note: Notification) -> HttpRequest:  # pragma: no cover - never HTTP
        raise NotImplementedError("the log channel makes no HTTP requests")

    async def _rate_wait(self) -> None:
        return None  # logging is local; no rate limit

    async def _send(self, note: Notification) -> tuple[int | None, str]:
        text = f"[{note.receiver}] " + formats.text_body(note).replace("\n", " | ")
        logging.getLogger("alerting.notify").log(self._level, "%s", text)
        self.lines = (self.lines + [text])[-self._keep :]
        return None, text


CHANNEL_TYPES: dict[str, type[Channel]] = {
    c.kind: c
    for c in (
        WebhookChannel,
        SlackChannel,
        FeishuChannel,
        DingTalkChannel,
        WeComChannel,
        PagerDutyChannel,
        LogChannel,
    )
}


def build_channel(
    receiver: str, index: int, cfg: ChannelConfig, *, environ: Mapping[str, str], **kw: Any
) -> Channel:
    """A channel named ``<receiver>/<type>/<index>`` from its config; secrets resolved now.

    ``kw`` is passed to :class:`alerting.delivery.Channel` (client, clock, sleep, monotonic,
    on_result). Raises ValueError naming the channel when a secret or URL is missing.
    """
    kind = cfg.type
    if kind not in CHANNEL_TYPES:
        raise ValueError(
            f"unknown channel type {kind!r}; valid: {', '.join(sorted(CHANNEL_TYPES))}"
        )
    name = f"{receiver}/{kind}/{index}"
    where = f"receiver {receiver!r} channel {index} ({kind})"
    if isinstance(cfg, LogChannelConfig):
        return LogChannel(name, receiver, cfg, **kw)
    if isinstance(cfg, PagerDutyChannelConfig):
        key = resolve_secret(cfg.routing_key, cfg.routing_key_env, environ, where)
        return PagerDutyChannel(name, receiver, cfg, routing_key=key or "", **kw)
    url = resolve_secret(cfg.url, cfg.url_env, environ, where)
    assert url is not None  # config requires url or url_env
    if isinstance(cfg, FeishuChannelConfig):
        secret = resolve_secret(cfg.secret, cfg.secret_env, environ, where)
        return FeishuChannel(name, receiver, cfg, url=url, secret=secret, **kw)
    if isinstance(cfg, DingTalkChannelConfig):
        secret = resolve_secret(cfg.secret, cfg.secret_env, environ, where)
        return DingTalkChannel(name, receiver, cfg, url=url, secret=secret, **kw)
    if isinstance(cfg, WeComChannelConfig):
        key = resolve_secret(cfg.key, cfg.key_env, environ, where)
        return WeComChannel(name, receiver, cfg, url=url, key=key, **kw)
    if isinstance(cfg, SlackChannelConfig):
        return SlackChannel(name, receiver, cfg, url=url, **kw)
    return WebhookChannel(name, receiver, cfg, url=url, **kw)
