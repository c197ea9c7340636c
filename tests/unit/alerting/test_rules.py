"""Rule evaluator: pending -> firing after ``for``, resolution, thresholds, burn rate."""

from __future__ import annotations

import pytest

from alerting._private.rule_kinds import RULES
from alerting.events import Severity
from alerting.rules import MetricsSnapshot, ModelCounters, RuleEvaluator
from alerting.rules_config import RulesConfig

T0 = 1_700_000_000.0


def only(**rules) -> RulesConfig:
    """A config with every rule disabled except those given."""
    data = {name: {"enabled": False} for name in RULES}
    for name, settings in rules.items():
        data[name] = {"enabled": True, "for": 0, **settings}
    data["min_requests"] = 10
    return RulesConfig.model_validate(data)


def test_every_config_rule_has_an_implementation() -> None:
    fields = set(RulesConfig.model_fields) - {"min_requests"}
    assert fields == set(RULES)


def feed(ev: RuleEvaluator, snaps: list[MetricsSnapshot]) -> list[list[tuple[str, str, str]]]:
    out = []
    for s in snaps:
        out.append(
            [(a.name, a.status(s.at).value, a.labels.get("model", "")) for a in ev.evaluate(s)]
        )
    return out


def traffic(
    steps: list[tuple[int, int]], every: float = 10.0, model: str = "digits"
) -> list[MetricsSnapshot]:
    """Cumulative snapshots from per-step (requests, errors) increments."""
    reqs = errs = 0
    snaps = [MetricsSnapshot(T0, {model: ModelCounters()})]
    for i, (r, e) in enumerate(steps, start=1):
        reqs, errs = reqs + r, errs + e
        snaps.append(
            MetricsSnapshot(T0 + i * every, {model: ModelCounters(requests=reqs, errors=errs)})
        )
    return snaps


def test_error_rate_pending_then_firing_then_resolved() -> None:
    ev = RuleEvaluator(only(error_rate={"threshold": 0.1, "for": "30s", "window": "20s"}), "prod")
    snaps = traffic(
        [(100, 0), (100, 50), (100, 50), (100, 50), (100, 50), (100, 0), (100, 0), (100, 0)]
    )
    got = feed(ev, snaps[:6])
    assert ev.firing()[0].starts_at == T0 + 20  # starts when it began to hold (Prometheus activeAt)
    assert ev.firing()[0].severity is Severity.P2
    got += feed(ev, snaps[6:])
    fire = ("TimeshareErrorRate", "firing", "digits")
    # got[i] is the evaluation at t = 10 i. Holds from t=20; fires at t=50 (30 s later).
    assert got[:6] == [[], [], [], [], [], [fire]]
    assert got[6] == [fire]  # the 20 s window still covers the errors of t=50
    assert got[7] == [("TimeshareErrorRate", "resolved", "digits")]
    assert got[8] == []  # resolved once, then quiet


def test_condition_shorter_than_for_never_fires() -> None:
    ev = RuleEvaluator(only(error_rate={"threshold": 0.1, "for": "60s", "window": "10s"}), "prod")
    got = feed(ev, traffic([(100, 50), (100, 50), (100, 0), (100, 0)]))
    assert got == [[], [], [], [], []]
    assert ev.pending() == []


def test_min_requests_keeps_ratio_rules_quiet() -> None:
    ev = RuleEvaluator(only(error_rate={"threshold": 0.1, "window": "10s"}), "prod")
    assert feed(ev, traffic([(5, 5), (5, 5)])) == [[], [], []]


def test_counter_reset_is_not_negative() -> None:
    ev = RuleEvaluator(only(error_rate={"threshold": 0.1, "window": "10s"}), "prod")
    snaps = [
        MetricsSnapshot(T0, {"m": ModelCounters(requests=1000, errors=0)}),
        MetricsSnapshot(
            T0 + 10, {"m": ModelCounters(requests=100, errors=50)}
        ),  # process restarted
    ]
    assert feed(ev, snaps) == [[], [("TimeshareErrorRate", "firing", "m")]]


def test_latency_multiwindow_burn_rate_picks_most_severe_pair() -> None:
    cfg = only(
        latency_slo={
            "objective": 0.99,
            "windows": [
                {"long": "10m", "short": "1m", "burn_rate": 14.4, "severity": "P1"},
                {"long": "30m", "short": "5m", "burn_rate": 6, "severity": "P2"},
            ],
        }
    )
    ev = RuleEvaluator(cfg, "prod")
    reqs = slow = 0
    alerts = []
    for i in range(61):  # one snapshot per minute; 10% slow from minute 30 on (burn 10x)
        reqs += 1000
        slow += 100 if i >= 30 else 0
        alerts = ev.evaluate(
            MetricsSnapshot(T0 + 60 * i, {"m": ModelCounters(requests=reqs, slow=slow)})
        )
        if i == 40:  # the 30 m window is not burning 6x yet
            assert alerts == []
    # 10% slow = 10x burn: the P2 pair (6x) fires, the P1 pair (14.4x) never does.
    assert [(a.name, a.severity) for a in alerts] == [("TimeshareLatencySLOBurn", Severity.P2)]
    slow += 20_000  # a burst: 20x over both P1 windows
    reqs += 1000
    alerts = ev.evaluate(
        MetricsSnapshot(T0 + 61 * 60, {"m": ModelCounters(requests=reqs, slow=slow)})
    )
    by_sev = {(a.severity, a.status(T0 + 61 * 60).value) for a in alerts}
    assert by_sev == {(Severity.P1, "firing"), (Severity.P2, "resolved")}


def test_set_and_gauge_rules_fire_per_member_and_resolve() -> None:
    cfg = only(
        breaker_open={"for": 0},
        model_load_failure={},
        cache_tier_down={},
        channel_failing={},
        device_memory_pressure={"threshold": 0.9},
    )
    ev = RuleEvaluator(cfg, "staging")
    s1 = MetricsSnapshot(
        T0,
        open_breakers=frozenset({"digits@gpu"}),
        failed_models=frozenset({"m2"}),
        cache_tiers_down=frozenset({"redis"}),
        failing_channels=frozenset({"oncall/slack/0"}),
        device_memory_used={"cuda:0": 0.97, "cuda:1": 0.5},
    )
    names = sorted((a.name, dict(a.labels)) for a in ev.evaluate(s1))
    assert [n for n, _ in names] == [
        "TimeshareAlertChannelFailing",
        "TimeshareBreakerOpen",
        "TimeshareCacheTierDown",
        "TimeshareDeviceMemoryPressure",
        "TimeshareModelLoadFailed",
    ]
    assert {"breaker": "digits@gpu"}.items() <= names[1][1].items() and names[1][1][
        "env"
    ] == "staging"
    assert names[3][1]["device"] == "cuda:0"
    out = ev.evaluate(MetricsSnapshot(T0 + 15, open_breakers=frozenset({"digits@gpu"})))
    resolved = sorted(a.name for a in out if a.resolved_at(T0 + 15))
    assert resolved == [
        "TimeshareAlertChannelFailing",
        "TimeshareCacheTierDown",
        "TimeshareDeviceMemoryPressure",
        "TimeshareModelLoadFailed",
    ]


def test_increase_rules_restarts_and_swap_thrashing() -> None:
    cfg = only(
        replica_restarts={"threshold": 3, "window": "10m"},
        swap_thrashing={"threshold": 5, "window": "1m"},
    )
    ev = RuleEvaluator(cfg, "prod")
    assert ev.evaluate(MetricsSnapshot(T0, replica_restarts=1, swaps=0)) == []
    assert ev.evaluate(MetricsSnapshot(T0 + 60, replica_restarts=3, swaps=600)) != []
    names = sorted(a.name for a in ev.firing())
    assert names == ["TimeshareSwapThrashing"]  # 2 restarts < 3; 600 swaps/60 s > 5/s
    ev.evaluate(MetricsSnapshot(T0 + 120, replica_restarts=4, swaps=610))
    assert sorted(a.name for a in ev.firing()) == ["TimeshareReplicaRestarts"]


def test_snapshots_must_move_forward() -> None:
    ev = RuleEvaluator(RulesConfig(), "prod")
    ev.evaluate(MetricsSnapshot(T0 + 10))
    with pytest.raises(ValueError, match="older"):
        ev.evaluate(MetricsSnapshot(T0))
