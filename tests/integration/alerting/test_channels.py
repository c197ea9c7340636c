"""Channels against a real HTTP receiver on loopback: payloads, signatures, retries, failures."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from alerting.channels import build_channel
from alerting.clock import FakeClock
from alerting.config import ChannelConfig
from alerting.delivery import Channel
from alerting.events import Alert
from alerting.notification import Notification
from tests.support.clocks import FakeClock as SettableClock
from tests.support.receiver import Receiver, dead_url

T0 = 1_700_000_000.0
_ADAPTER = TypeAdapter(ChannelConfig)


class FakeTime(SettableClock):
    """Removes sleeps: records each requested delay and advances the fake monotonic clock."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self()

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.advance(seconds)
        await asyncio.sleep(0)


_MADE: list[Channel] = []


@pytest.fixture
async def client():
    async with httpx.AsyncClient() as c:
        yield c
    # Invariant: every channel drained; closing them leaves no worker task behind.
    for ch in _MADE:
        assert ch.pending == 0, f"{ch.name} still has {ch.pending} pending"
        await ch.close()
    _MADE.clear()


def channel(
    cfg: dict[str, Any],
    client: httpx.AsyncClient,
    *,
    time: FakeTime | None = None,
    environ: dict[str, str] | None = None,
    receiver: str = "oncall",
) -> Channel:
    cfg.setdefault("delivery", {})
    cfg["delivery"].setdefault("backoff_initial", 0.5)
    t = time or FakeTime()
    ch = build_channel(
        receiver,
        0,
        _ADAPTER.validate_python(cfg),
        environ=environ or {},
        client=client,
        clock=FakeClock(T0),
        sleep=t.sleep,
        monotonic=t.monotonic,
    )
    _MADE.append(ch)
    return ch


def note(
    *, resolved: bool = False, sev: str = "P1", key: str = '{}:{alertname="ModelDown"}'
) -> Notification:
    a = Alert.create(
        "ModelDown",
        sev,
        "prod",
        labels={"model": "digits", "instance": "r1"},
        annotations={"summary": "digits fails"},
        starts_at=T0 - 60,
    )
    b = Alert.create(
        "ModelDown",
        sev,
        "prod",
        labels={"model": "digits", "instance": "r2"},
        annotations={"summary": "digits fails"},
        starts_at=T0 - 30,
    )
    if resolved:
        a, b = a.resolve(T0 - 5), b.resolve(T0 - 5)
    return Notification("oncall", key, {"alertname": "ModelDown"}, (a, b), T0)


async def deliver(ch: Channel, *notes: Notification) -> None:
    for n in notes:
        ch.enqueue(n)
    assert await ch.drain(timeout=10)


async def test_webhook_alertmanager_json(receiver: Receiver, client) -> None:
    ch = channel({"type": "webhook", "url": receiver.url("/am")}, client)
    await deliver(ch, note(), note(resolved=True))
    firing, resolved = (r.body for r in receiver.at("/am"))
    assert (
        firing["version"] == "4" and firing["status"] == "firing" and firing["receiver"] == "oncall"
    )
    assert firing["groupKey"] == '{}:{alertname="ModelDown"}'
    assert firing["groupLabels"] == {"alertname": "ModelDown"}
    assert firing["commonLabels"] == {
        "alertname": "ModelDown",
        "env": "prod",
        "model": "digits",
        "severity": "P1",
    }
    assert firing["commonAnnotations"] == {"summary": "digits fails"}
    assert [a["labels"]["instance"] for a in firing["alerts"]] == ["r1", "r2"]
    first = firing["alerts"][0]
    assert first["status"] == "firing" and first["endsAt"] == "0001-01-01T00:00:00Z"
    assert first["startsAt"] == "2023-11-14T22:12:20Z"
    assert first["fingerprint"] == note().alerts[0].fingerprint
    assert (
        resolved["status"] == "resolved"
        and resolved["alerts"][0]["endsAt"] == "2023-11-14T22:13:15Z"
    )
    assert ch.stats.delivered == 2 and ch.stats.failed == 0


async def test_slack_incoming_webhook(receiver: Receiver, client) -> None:
    ch = channel({"type": "slack", "url": receiver.url("/slack"), "channel": "#oncall"}, client)
    await deliver(ch, note(), note(resolved=True))
    firing, resolved = (r.body for r in receiver.at("/slack"))
    assert firing["text"] == "[FIRING:2] ModelDown (P1 prod)" and firing["channel"] == "#oncall"
    assert firing["attachments"][0]["color"] == "#d63232"
    assert "FIRING digits fails [instance=r1]" in firing["attachments"][0]["text"]
    assert resolved["attachments"][0]["color"] == "#2eb886"


async def test_feishu_signed(receiver: Receiver, client) -> None:
    ch = channel(
        {"type": "feishu", "url": receiver.url("/feishu"), "secret_env": "FEISHU_SECRET"},
        client,
        environ={"FEISHU_SECRET": "s3cret"},
    )
    await deliver(ch, note())
    (req,) = receiver.at("/feishu")
    ts = req.body["timestamp"]
    assert ts == str(int(T0))
    expected = base64.b64encode(
        hmac.new(f"{ts}\ns3cret".encode(), b"", hashlib.sha256).digest()
    ).decode()
    assert req.body["sign"] == expected
    assert req.body["msg_type"] == "text" and req.body["content"]["text"].startswith(
        "[FIRING:2] ModelDown"
    )


async def test_dingtalk_signed(receiver: Receiver, client) -> None:
    ch = channel(
        {
            "type": "dingtalk",
            "url": receiver.url("/robot/send?access_token=tok"),
            "secret": "SECabc",
            "at_mobiles": ["13800000000"],
        },
        client,
    )
    await deliver(ch, note())
    (req,) = receiver.at("/robot/send")
    assert req.query["access_token"] == "tok"
    ts = req.query["timestamp"]
    assert ts == str(int(T0 * 1000))
    digest = hmac.new(b"SECabc", f"{ts}\nSECabc".encode(), hashlib.sha256).digest()
    assert req.query["sign"] == base64.b64encode(digest).decode()  # parse_qsl undid the urlencoding
    assert req.body["msgtype"] == "markdown" and req.body["at"]["atMobiles"] == ["13800000000"]
    assert req.body["markdown"]["text"].startswith("### [FIRING:2] ModelDown")


async def test_wecom_markdown(receiver: Receiver, client) -> None:
    ch = channel(
        {"type": "wecom", "url": receiver.url("/cgi-bin/webhook/send"), "key": "k-1"}, client
    )
    await deliver(ch, note())
    (req,) = receiver.at("/cgi-bin/webhook/send")
    assert req.query == {"key": "k-1"}
    assert req.body["msgtype"] == "markdown" and "ModelDown" in req.body["markdown"]["content"]


async def test_pagerduty_trigger_then_resolve_same_dedup_key(receiver: Receiver, client) -> None:
    ch = channel(
        {"type": "pagerduty", "url": receiver.url("/v2/enqueue"), "routing_key_env": "PD_KEY"},
        client,
        environ={"PD_KEY": "R0UTING"},
    )
    receiver.on("/v2/enqueue", (202, '{"status": "success", "dedup_key": "x"}'))
    await deliver(ch, note(), note(sev="P3"), note(resolved=True))
    trig, warn, res = (r.body for r in receiver.at("/v2/enqueue"))
    key = hashlib.sha256(b'{}:{alertname="ModelDown"}').hexdigest()
    assert (
        trig["routing_key"] == "R0UTING"
        and trig["event_action"] == "trigger"
        and trig["dedup_key"] == key
    )
    assert trig["payload"]["severity"] == "critical" and trig["payload"]["source"] == "timeshare"
    assert trig["payload"]["summary"] == "[FIRING:2] ModelDown (P1 prod)"
    assert warn["payload"]["severity"] == "warning"
    assert res == {"routing_key": "R0UTING", "event_action": "resolve", "dedup_key": key}


async def test_log_channel_records_lines(client) -> None:
    ch = channel({"type": "log", "level": "info"}, client)
    await deliver(ch, note())
    line = (
        "[oncall] [FIRING:2] ModelDown (P1 prod) | FIRING digits fails [instance=r1] | "
        "FIRING digits fails [instance=r2]"
    )
    assert ch.lines == [line]
    assert ch.stats.delivered == 1


async def test_retries_5xx_with_exponential_backoff(receiver: Receiver, client) -> None:
    t = FakeTime()
    ch = channel({"type": "webhook", "url": receiver.url("/flaky")}, client, time=t)
    receiver.on("/flaky", (503, "busy"), (502, "bad gw"), (500, "oops"), (200, "ok"))
    await deliver(ch, note())
    assert len(receiver.at("/flaky")) == 4
    assert t.sleeps == [0.5, 1.0, 2.0]
    assert ch.stats.last.ok and ch.stats.last.attempts == 4 and ch.stats.retries == 3


async def test_429_honours_retry_after_and_gives_up_when_bounded(
    receiver: Receiver, client
) -> None:
    t = FakeTime()
    ch = channel(
        {
            "type": "slack",
            "url": receiver.url("/slow"),
            "delivery": {"max_attempts": 3, "backoff_max": 5},
        },
        client,
        time=t,
    )
    receiver.on(
        "/slow",
        (429, "rate limited", {"Retry-After": "2"}),
        (429, "x", {"Retry-After": "60"}),
        (503, "x"),
    )
    await deliver(ch, note())
    assert len(receiver.at("/slow")) == 3
    assert t.sleeps == [2.0, 5.0]  # Retry-After honoured, capped at backoff_max
    assert (
        not ch.stats.last.ok
        and ch.stats.last.status_code == 503
        and "gave up after 3" in ch.stats.last.error
    )


async def test_400_is_not_retried(receiver: Receiver, client) -> None:
    t = FakeTime()
    ch = channel({"type": "webhook", "url": receiver.url("/bad")}, client, time=t)
    receiver.on("/bad", (400, '{"error": "bad payload"}'))
    await deliver(ch, note())
    assert len(receiver.at("/bad")) == 1 and t.sleeps == []
    assert (
        ch.stats.failed == 1
        and ch.stats.last.status_code == 400
        and "bad payload" in ch.stats.last.body
    )


async def test_robot_error_codes_in_200_bodies(receiver: Receiver, client) -> None:
    t = FakeTime()
    ch = channel({"type": "dingtalk", "url": receiver.url("/ding"), "secret": "s"}, client, time=t)
    receiver.on(
        "/ding", (200, '{"errcode": 130101, "errmsg": "send too fast"}'), (200, '{"errcode": 0}')
    )
    await deliver(ch, note())
    assert len(receiver.at("/ding")) == 2 and ch.stats.delivered == 1  # rate-limit code retried
    receiver.on("/ding", (200, '{"errcode": 310000, "errmsg": "sign not match"}'))
    await deliver(ch, note())
    assert len(receiver.at("/ding")) == 3 and ch.stats.failed == 1  # bad signature: not retried
    assert "sign not match" in ch.stats.last.error


async def test_receiver_down_never_blocks_or_raises(client) -> None:
    ch = build_channel(
        "oncall",
        0,
        _ADAPTER.validate_python(
            {
                "type": "webhook",
                "url": dead_url(),
                "delivery": {"max_attempts": 3, "backoff_initial": 0.01},
            }
        ),
        environ={},
        client=client,
    )
    ch.enqueue(note())  # returns at once; delivery happens on the channel's own task
    assert ch.pending == 1 and ch.stats.last is None
    assert await ch.drain(timeout=10)
    assert (
        ch.stats.failed == 1
        and ch.stats.last.attempts == 3
        and "ConnectError" in ch.stats.last.error
    )
    await ch.close()


async def test_bounded_queue_drops_oldest(receiver: Receiver, client) -> None:
    ch = channel(
        {"type": "webhook", "url": receiver.url("/q"), "delivery": {"queue_size": 2}}, client
    )
    for i in range(5):  # no await in between: the worker has not taken any yet
        ch.enqueue(note(key=f"g{i}"))
    assert ch.stats.dropped == 3
    assert await ch.drain(timeout=10)
    assert [r.body["groupKey"] for r in receiver.at("/q")] == ["g3", "g4"]


async def test_rate_limit_spaces_sends(receiver: Receiver, client) -> None:
    t = FakeTime()
    ch = channel(
        {"type": "webhook", "url": receiver.url("/rl"), "delivery": {"rate_per_s": 2, "burst": 2}},
        client,
        time=t,
    )
    await deliver(ch, *(note(key=f"g{i}") for i in range(4)))
    assert len(receiver.at("/rl")) == 4
    assert t.sleeps == [0.5, 0.5]  # two at once (burst), then one per 1/rate seconds


def test_missing_secret_env_names_the_variable() -> None:
    cfg = _ADAPTER.validate_python(
        {"type": "feishu", "url": "http://127.0.0.1:1/x", "secret_env": "NOPE_SECRET"}
    )
    with pytest.raises(ValueError, match="NOPE_SECRET"):
        build_channel("oncall", 0, cfg, environ={})
    with pytest.raises(ValueError, match="routing_key"):
        _ADAPTER.validate_python({"type": "pagerduty"})
    with pytest.raises(ValueError, match="bogus"):
        _ADAPTER.validate_python({"type": "slack", "url": "http://x", "bogus": 1})
