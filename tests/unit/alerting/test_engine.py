"""Notification engine against Alertmanager's timing semantics, driven by a fake clock."""

from __future__ import annotations

import pytest

from alerting.clock import FakeClock
from alerting.config import load_config
from alerting.engine import NotificationEngine
from alerting.events import Alert, AlertStatus
from alerting.notification import Notification

T0 = 1_700_000_000.0


def make_engine(
    route: dict, receivers=("default",), send_resolved=True, inhibit=()
) -> NotificationEngine:
    cfg = load_config(
        {
            "environment": "prod",
            "route": route,
            "receivers": [{"name": r, "send_resolved": send_resolved} for r in receivers],
            "inhibit_rules": list(inhibit),
        }
    )
    return NotificationEngine.from_config(cfg)


class Driver:
    """Fires the engine's timers exactly when due, like Alertmanager's per-group timers."""

    def __init__(self, engine: NotificationEngine) -> None:
        self.engine = engine
        self.clock = FakeClock(T0)
        self.sent: list[Notification] = []

    def at(self, offset: float) -> float:
        return T0 + offset

    def put(self, name: str, offset: float, sev: str = "P3", **labels: str) -> Alert:
        self.run_until(offset)
        alert = Alert.create(name, sev, "prod", labels=labels, starts_at=self.at(offset))
        self.engine.put(alert, self.clock())
        return alert

    def resolve(self, alert: Alert, offset: float) -> None:
        self.run_until(offset)
        self.engine.put(alert.resolve(self.at(offset)), self.clock())

    def run_until(self, offset: float) -> list[Notification]:
        end = self.at(offset)
        new: list[Notification] = []
        while (due := self.engine.next_due()) is not None and due <= end:
            self.clock.set(max(due, self.clock()))
            new += self.engine.tick(self.clock())
        self.clock.set(end)
        self.sent += new
        return new


def summary(notes: list[Notification], t0: float = T0) -> list[tuple]:
    return [
        (
            n.at - t0,
            n.receiver,
            n.status.value,
            sorted(a.labels.get("instance", a.name) for a in n.alerts),
        )
        for n in notes
    ]


ROUTE = {
    "receiver": "default",
    "group_by": ["alertname"],
    "group_wait": "30s",
    "group_interval": "1m",
    "repeat_interval": "5m",
}


def test_batching_within_group_wait() -> None:
    d = Driver(make_engine(ROUTE))
    d.put("HighLatency", 0, instance="a")
    d.put("HighLatency", 10, instance="b")
    d.put("ErrorRate", 20, instance="c")  # another group: own group_wait from t=20
    assert d.run_until(29.9) == []
    assert summary(d.run_until(30)) == [(30, "default", "firing", ["a", "b"])]
    assert summary(d.run_until(50)) == [(50, "default", "firing", ["c"])]


def test_group_interval_sends_updates_only_at_interval() -> None:
    d = Driver(make_engine(ROUTE))
    d.put("HighLatency", 0, instance="a")
    d.run_until(30)
    d.put("HighLatency", 40, instance="b")
    assert d.run_until(89.9) == []  # b waits for the group's next interval, not group_wait
    assert summary(d.run_until(90)) == [(90, "default", "firing", ["a", "b"])]
    assert d.run_until(149) == []  # nothing changed: no notification at 150 either
    assert d.run_until(150) == []


def test_repeat_after_repeat_interval() -> None:
    d = Driver(make_engine(ROUTE))
    d.put("HighLatency", 0, instance="a")
    notes = d.run_until(1000)
    # First at 30; the group is evaluated every 60 s; repeats once 300 s have passed.
    assert [n.at - T0 for n in notes] == [30, 330, 630, 930]


def test_send_resolved_true_notifies_resolution_once() -> None:
    d = Driver(make_engine(ROUTE, send_resolved=True))
    a = d.put("HighLatency", 0, instance="a")
    b = d.put("HighLatency", 0, instance="b")
    d.run_until(30)
    d.resolve(a, 100)
    assert summary(d.run_until(150)) == [(150, "default", "firing", ["a", "b"])]
    assert [x.fingerprint for x in d.sent[-1].resolved] == [a.fingerprint]
    d.resolve(b, 160)
    assert summary(d.run_until(210)) == [(210, "default", "resolved", ["b"])]
    assert d.engine.groups() == {}  # empty group deleted
    assert d.run_until(3000) == []  # and never repeated


def test_send_resolved_false_stays_quiet_and_does_not_repeat() -> None:
    d = Driver(make_engine(ROUTE, send_resolved=False))
    a = d.put("HighLatency", 0, instance="a")
    b = d.put("HighLatency", 0, instance="b")
    d.run_until(30)
    d.resolve(a, 100)
    assert d.run_until(200) == []  # a resolved: nothing sent
    d.resolve(b, 250)
    assert d.run_until(3000) == []  # all resolved: nothing sent, no repeats
    d.put("HighLatency", 3000, instance="a")  # fires again: a fresh group, fresh group_wait
    assert summary(d.run_until(3030)) == [(3030, "default", "firing", ["a"])]


def test_inhibition_while_source_fires_and_release_after() -> None:
    inhibit = [
        {
            "source_matchers": ['severity="P1"'],
            "target_matchers": ['severity=~"P3|P4"'],
            "equal": ["model"],
        }
    ]
    d = Driver(make_engine(ROUTE, inhibit=inhibit))
    src = d.put("ModelDown", 0, sev="P1", model="m", instance="src")
    d.put("HighLatency", 0, sev="P3", model="m", instance="m-lat")
    d.put("HighLatency", 0, sev="P3", model="other", instance="other-lat")
    assert summary(d.run_until(30)) == [
        (30, "default", "firing", ["other-lat"]),  # m-lat muted by ModelDown{model=m}
        (30, "default", "firing", ["src"]),
    ]
    d.resolve(src, 40)
    notes = summary(d.run_until(90))
    assert (90, "default", "firing", ["m-lat", "other-lat"]) in notes  # released
    assert (90, "default", "resolved", ["src"]) in notes


def test_alert_matching_source_and_target_does_not_inhibit_itself() -> None:
    inhibit = [{"source_matchers": ['alertname="X"'], "target_matchers": ['alertname="X"']}]
    d = Driver(make_engine(ROUTE, inhibit=inhibit))
    d.put("X", 0, instance="a")
    assert summary(d.run_until(30)) == [(30, "default", "firing", ["a"])]


def test_silence_mutes_until_expired() -> None:
    d = Driver(make_engine(ROUTE))
    sid = d.engine.silences.add(
        ['alertname="HighLatency"', 'instance=~"a|b"'],
        starts_at=d.at(0),
        ends_at=d.at(3600),
        comment="maintenance",
    )
    d.put("HighLatency", 0, instance="a")
    d.put("HighLatency", 0, instance="z")
    assert summary(d.run_until(30)) == [(30, "default", "firing", ["z"])]
    assert d.run_until(100) == []
    d.engine.silences.expire(sid, d.clock())
    assert summary(d.run_until(150)) == [(150, "default", "firing", ["a", "z"])]


def test_silence_starting_later_and_unknown_id() -> None:
    d = Driver(make_engine(ROUTE))
    d.engine.silences.add(['alertname="HighLatency"'], starts_at=d.at(100), ends_at=d.at(200))
    d.put("HighLatency", 0, instance="a")
    assert len(d.run_until(30)) == 1
    with pytest.raises(KeyError, match="s999"):
        d.engine.silences.expire("s999", d.clock())
    with pytest.raises(ValueError, match="matcher"):
        d.engine.silences.add([], starts_at=d.at(0), ends_at=d.at(1))


def test_routing_with_continue_and_inheritance() -> None:
    route = dict(
        ROUTE,
        routes=[
            {
                "matchers": ['severity=~"P1|P2"'],
                "receiver": "pager",
                "continue": True,
                "group_wait": "5s",
            },
            {"matchers": ['team="db"'], "receiver": "db", "group_by": ["alertname", "team"]},
            {"matchers": ['team="db"'], "receiver": "never"},  # shadowed: db has no continue
        ],
    )
    d = Driver(make_engine(route, receivers=("default", "pager", "db", "never")))
    pager, db, _shadowed = d.engine.route.children
    assert (pager.opts.group_by, pager.opts.group_interval, pager.opts.group_wait) == (
        ("alertname",),
        60,
        5,
    )
    assert db.opts.repeat_interval == 300 and db.opts.group_wait == 30
    d.put("ModelDown", 0, sev="P1", team="db", instance="p1-db")
    d.put("ModelDown", 0, sev="P1", team="web", instance="p1-web")
    d.put("HighLatency", 0, sev="P3", team="web", instance="p3-web")
    got = summary(d.run_until(30))
    assert sorted(got) == [
        (5, "pager", "firing", ["p1-db", "p1-web"]),
        (30, "db", "firing", ["p1-db"]),
        (30, "default", "firing", ["p3-web"]),
    ]


def test_group_by_all_labels_and_late_alert_flushes_at_once() -> None:
    d = Driver(make_engine(dict(ROUTE, group_by=["..."])))
    d.run_until(100)
    old = Alert.create("Old", "P3", "prod", labels={"instance": "x"}, starts_at=d.at(0))
    d.engine.put(old, d.clock())  # started 100 s ago > group_wait: no extra wait
    assert summary(d.run_until(100)) == [(100, "default", "firing", ["x"])]
    d.put("Old", 100, instance="y")  # a different label set: its own group, normal group_wait
    assert len(d.engine.groups()) == 2
    assert summary(d.run_until(130)) == [(130, "default", "firing", ["y"])]


def test_unacknowledged_p1_repeats_acknowledged_stops() -> None:
    d = Driver(make_engine(dict(ROUTE, repeat_interval="2m")))
    a = d.put("ModelDown", 0, sev="P1", instance="a")
    assert [n.at - T0 for n in d.run_until(300)] == [30, 150, 270]
    assert d.engine.acknowledge(a.fingerprint)
    assert d.run_until(1000) == []
    b = d.put("ModelDown", 1000, sev="P1", instance="b")  # a new alert still notifies
    assert summary(d.run_until(1050)) == [(1050, "default", "firing", ["a", "b"])]
    assert [n.at - T0 for n in d.run_until(1300)] == [1170, 1290]  # b is not acknowledged
    d.engine.acknowledge(b.fingerprint)
    assert d.run_until(2000) == []
    d.resolve(a, 2000)
    assert d.engine.nflog.acknowledged == {b.fingerprint}  # resolving clears its ack
    assert not d.engine.acknowledge("0000000000000000")


def test_notification_fields() -> None:
    d = Driver(make_engine(ROUTE))
    d.put("HighLatency", 0, instance="a", model="m")
    d.put("HighLatency", 0, instance="b", model="m")
    (n,) = d.run_until(30)
    assert n.status is AlertStatus.FIRING
    assert n.group_labels == {"alertname": "HighLatency"}
    assert n.common_labels == {
        "alertname": "HighLatency",
        "env": "prod",
        "model": "m",
        "severity": "P3",
    }
    assert n.title() == "[FIRING:2] HighLatency (P3 prod)"
