"""Alerter core end to end: engine + channels + policy + persistence, real HTTP and Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

from alerting.alerter import Alerter
from alerting.clock import FakeClock, SystemClock
from alerting.config import load_config
from alerting.events import Alert
from alerting.telemetry import Telemetry
from tests.support.receiver import Receiver, dead_url
from tests.support.redis import RedisServer

T0 = 1_700_000_000.0
FAST = {"channel_options": {"sleep": lambda s: asyncio.sleep(0)}}  # retries without real sleeps


def config(env: str, receiver_url: str, **extra: Any):
    return load_config(
        {
            "environment": env,
            "route": {
                "receiver": "team",
                "group_by": ["alertname"],
                "group_wait": "30s",
                "group_interval": "1m",
                "repeat_interval": "10m",
                "routes": [
                    {"matchers": ['severity=~"P1|P2"'], "receiver": "pager", "continue": True},
                    {"receiver": "team"},
                ],
            },
            "receivers": [
                {
                    "name": "pager",
                    "channels": [
                        {"type": "pagerduty", "url": receiver_url + "/pd", "routing_key": "k"}
                    ],
                },
                {
                    "name": "team",
                    "channels": [
                        {
                            "type": "webhook",
                            "url": receiver_url + "/team",
                            "delivery": {"max_attempts": 2},
                        }
                    ],
                },
            ],
            **extra,
        }
    )


def model_down(clock: FakeClock, instance: str, sev: str = "P1") -> Alert:
    return Alert.create(
        "ModelDown",
        sev,
        "prod",
        labels={"model": "digits", "instance": instance},
        annotations={"summary": "digits fails"},
        starts_at=clock(),
    )


def pages(receiver: Receiver) -> list[Any]:
    """What the pager received, for an assertion's message."""
    return [r.body for r in receiver.at("/pd")]


async def advance(alerter: Alerter, clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    await alerter.step()
    assert await alerter.drain(timeout=10)


async def test_prod_pages_once_grouped_then_resolves(receiver: Receiver) -> None:
    clock = FakeClock(T0)
    telemetry = Telemetry.in_memory()
    alerter = Alerter(config("prod", receiver.base), clock=clock, telemetry=telemetry)
    a, b = model_down(clock, "r1"), model_down(clock, "r2")
    alerter.submit(a)
    alerter.submit(b.to_dict())  # the dict form, as it crosses a Ray handle
    alerter.submit(a)  # duplicates are merged
    await advance(alerter, clock, 29)
    assert receiver.requests == []
    await advance(alerter, clock, 1)
    (pd,) = receiver.at("/pd")
    assert pd.body["event_action"] == "trigger" and pd.body["payload"]["severity"] == "critical"
    assert pd.body["payload"]["summary"] == "[FIRING:2] ModelDown (P1 prod)"
    assert len(receiver.at("/team")) == 1  # continue: the team hears about it too
    alerter.submit(a.resolve(clock()))
    alerter.submit(b.resolve(clock()))
    await advance(alerter, clock, 60)
    pd_resolve = receiver.at("/pd")[1].body
    assert (
        pd_resolve["event_action"] == "resolve" and pd_resolve["dedup_key"] == pd.body["dedup_key"]
    )
    assert receiver.at("/team")[1].body["status"] == "resolved"
    await advance(alerter, clock, 3600)
    assert len(receiver.requests) == 4  # nothing more
    sent = telemetry.metric_reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
    (counter,) = [m for m in sent if m.name == "timeshare.alerts.sent"]
    assert sum(p.value for p in counter.data.data_points) == 4
    await alerter.stop()


async def test_unacknowledged_p1_repeats_until_acknowledged(receiver: Receiver) -> None:
    clock = FakeClock(T0)
    alerter = Alerter(config("prod", receiver.base), clock=clock)
    a = model_down(clock, "r1")
    alerter.submit(a)
    for _ in range(25):  # 30 s + 24 min, ticking each minute
        await advance(alerter, clock, 60)
    assert len(receiver.at("/pd")) == 3  # first, then every 10 min
    assert alerter.acknowledge(a.fingerprint)
    for _ in range(30):
        await advance(alerter, clock, 60)
    assert len(receiver.at("/pd")) == 3
    await alerter.stop()


async def test_staging_is_capped_at_p3_and_never_pages(receiver: Receiver) -> None:
    clock = FakeClock(T0)
    alerter = Alerter(config("staging", receiver.base), clock=clock)
    alerter.submit(model_down(clock, "r1", "P1"))
    await advance(alerter, clock, 30)
    assert receiver.at("/pd") == []
    (team,) = receiver.at("/team")
    alert = team.body["alerts"][0]
    assert alert["labels"]["severity"] == "P3" and alert["labels"]["env"] == "staging"
    assert alert["annotations"]["original_severity"] == "P1"
    await alerter.stop()


async def test_prod_pager_only_for_p1_p2_even_if_routed(receiver: Receiver) -> None:
    cfg = config("prod", receiver.base)
    cfg.route.routes[0].matchers = []  # route everything to the pager receiver
    alerter = Alerter(cfg, clock=(clock := FakeClock(T0)))
    alerter.submit(model_down(clock, "r1", "P3"))
    await advance(alerter, clock, 30)
    assert receiver.at("/pd") == [] and len(receiver.at("/team")) == 1
    await alerter.stop()


async def test_test_environment_only_logs(receiver: Receiver) -> None:
    clock = FakeClock(T0)
    alerter = Alerter(config("test", receiver.base), clock=clock)
    alerter.submit(model_down(clock, "r1", "P1"))
    await advance(alerter, clock, 30)
    assert receiver.requests == []
    lines = [line for chs in alerter.channels.values() for ch in chs for line in ch.lines]
    assert len(lines) == 2 and all("ModelDown" in line for line in lines)
    await alerter.stop()


async def test_receiver_down_submit_returns_and_channel_reported_failing() -> None:
    clock = FakeClock(T0)
    alerter = Alerter(config("prod", dead_url("")), clock=clock, **FAST)
    assert alerter.submit(model_down(clock, "r1")) is True
    await advance(alerter, clock, 30)  # nothing raises; retries are bounded
    assert alerter.failing_channels() == {"pager/pagerduty/0", "team/webhook/0"}
    assert alerter.status()["channels"]["team/webhook/0"]["failed"] == 1
    await alerter.stop()


async def test_send_test_reports_each_channel(receiver: Receiver) -> None:
    receiver.on("/team", (500, "down"))
    alerter = Alerter(config("prod", receiver.base), **FAST)
    results = await alerter.send_test("P1")
    by = {r.channel: (r.ok, r.status_code, r.attempts) for r in results}
    assert by == {"pager/pagerduty/0": (True, 200, 1), "team/webhook/0": (False, 500, 2)}
    assert (
        receiver.at("/pd")[0]
        .body["payload"]["summary"]
        .startswith("[TEST] [FIRING:1] TimeshareTestAlert")
    )
    await alerter.stop()


async def test_background_loop_delivers_with_real_clock(receiver: Receiver) -> None:
    cfg = config("prod", receiver.base)
    cfg.route.routes[0].group_wait = 0.0
    alerter = Alerter(cfg, clock=SystemClock)
    await alerter.start()
    alerter.submit(model_down(SystemClock, "r1"))  # type: ignore[arg-type]
    for _ in range(200):
        if receiver.at("/pd"):
            break
        await asyncio.sleep(0.02)
    assert receiver.at("/pd")[0].body["event_action"] == "trigger"
    await alerter.stop()


async def restarted(cfg, clock: FakeClock) -> Alerter:
    """A restarted replica: an empty engine, its state loaded from Redis."""
    alerter = Alerter(cfg, clock=clock)
    await alerter.load_state()
    assert alerter.persistence == "redis"
    return alerter


@pytest.mark.redis
async def test_restart_does_not_repage_with_redis_state(receiver: Receiver, redis_url: str,
                                                        key_prefix: str) -> None:
    prefix = key_prefix.rstrip(":")
    clock = FakeClock(T0)
    cfg = config("prod", receiver.base, redis_url=redis_url, state_prefix=prefix)
    try:
        first = Alerter(cfg, clock=clock)
        await first.start()
        assert first.persistence == "redis"
        a = model_down(clock, "r1")
        first.submit(a)
        await advance(first, clock, 30)
        assert len(receiver.at("/pd")) == 1, pages(receiver)
        await first.stop()

        second = await restarted(cfg, clock)
        second.submit(a)  # the rule re-fires the same alert
        await advance(second, clock, 30)
        assert len(receiver.at("/pd")) == 1, pages(receiver)  # not re-paged
        second.acknowledge(a.fingerprint)
        await advance(second, clock, 1)
        await second.stop()

        third = await restarted(cfg, clock)
        third.submit(a)
        for _ in range(30):  # past repeat_interval: the acknowledgement survived too
            await advance(third, clock, 60)
        assert len(receiver.at("/pd")) == 1, pages(receiver)
        third.submit(a.resolve(clock()))
        await advance(third, clock, 60)
        assert [r.body["event_action"] for r in receiver.at("/pd")] == ["trigger", "resolve"]
        await third.stop()
    finally:
        r = redis.Redis.from_url(redis_url)
        keys = list(r.scan_iter(match=f"{prefix}:*"))
        if keys:
            r.delete(*keys)


async def test_unreachable_redis_falls_back_to_memory(receiver: Receiver) -> None:
    clock = FakeClock(T0)
    cfg = config("prod", receiver.base, redis_url=dead_url("").replace("http", "redis") + "/0")
    alerter = Alerter(cfg, clock=clock)
    await alerter.load_state()
    assert alerter.persistence == "memory"
    alerter.submit(model_down(clock, "r1"))
    await advance(alerter, clock, 30)
    assert len(receiver.at("/pd")) == 1
    await alerter.stop()


async def test_redis_back_after_a_failed_start_gets_the_state(receiver: Receiver,
                                                              redis_server: RedisServer) -> None:
    """A replica that started while Redis was away keeps retrying; once Redis is back, what it
    decided meanwhile is written there, so the next restart does not re-page."""
    server = redis_server  # not started yet: the first load finds nothing listening
    clock = FakeClock(T0)
    cfg = config("prod", receiver.base, redis_url=server.url, state_prefix="ts:test:retry")
    first = Alerter(cfg, clock=clock)
    first.STATE_RETRY_S = 0.0  # retry at every step (30 s by default)
    try:
        await first.load_state()
        assert first.persistence == "memory"
        a = model_down(clock, "r1")
        first.submit(a)
        await advance(first, clock, 30)
        assert len(receiver.at("/pd")) == 1, pages(receiver)
        server.start()
        await advance(first, clock, 1)
        assert first.persistence == "redis"
        await first.stop()

        second = await restarted(cfg, clock)
        second.submit(a)
        await advance(second, clock, 30)
        assert len(receiver.at("/pd")) == 1, pages(receiver)  # the page survived the outage
        await second.stop()
    finally:
        server.stop()
