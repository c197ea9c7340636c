"""AlertingConfig: the example YAML, durations, inheritance, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from alerting._private.duration import parse_duration
from alerting._private.routing import build_route_tree
from alerting.config import AlertingConfig, load_config
from alerting.events import Alert, Severity, fingerprint
from alerting.matchers import parse_matcher

EXAMPLE = Path(__file__).with_name("example_alerting.yaml")


def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())["alerting"]


def test_example_yaml_loads() -> None:
    cfg = load_config(EXAMPLE.read_text())
    assert cfg.environment == "prod" and cfg.effective_policy().page_severities == [
        Severity.P1,
        Severity.P2,
    ]
    pager = cfg.route.routes[0]
    assert pager.continue_ and pager.repeat_interval == 900
    assert cfg.rules.error_rate.severity is Severity.P1 and cfg.rules.error_rate.window == 300
    assert (
        cfg.rules.degraded_share.threshold == 0.25 and cfg.rules.degraded_share.for_ == 300
    )  # default kept
    assert cfg.receiver("digest").send_resolved is False
    tree = build_route_tree(cfg.route)
    assert (
        tree.children[0].opts.group_by == ("alertname", "model")
        and tree.children[0].opts.group_wait == 30
    )
    p1 = Alert.create("TimeshareErrorRate", "P1", "prod", labels={"model": "m"}, starts_at=0)
    assert [r.opts.receiver for r in tree.match(p1.labels)] == ["pager", "team"]


@pytest.mark.parametrize(
    "path, value, needle",
    [
        (("route", "bogus_key"), 1, "route.bogus_key"),
        (("receivers", 0, "channels", 0, "colour"), "red", "colour"),
        (("rules", "error_rate", "treshold"), 0.1, "treshold"),
        (("rules", "not_a_rule"), {}, "not_a_rule"),
        (("surprise",), True, "surprise"),
    ],
)
def test_unknown_keys_are_errors_naming_the_key(path, value, needle) -> None:
    data = example()
    node = data
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    with pytest.raises(ValidationError) as e:
        AlertingConfig.model_validate(data)
    assert needle in str(e.value) and "Extra inputs are not permitted" in str(e.value)


def test_errors_name_the_bad_value() -> None:
    data = example()
    data["route"]["routes"][1]["receiver"] = "nobody"
    with pytest.raises(
        ValidationError, match=r"route.routes\[1\].receiver 'nobody' is not a receiver"
    ):
        AlertingConfig.model_validate(data)
    data = example()
    data["route"]["routes"][0]["matchers"] = ["severity~P1"]
    with pytest.raises(ValidationError, match="bad matcher 'severity~P1'"):
        AlertingConfig.model_validate(data)
    data = example()
    data["route"]["group_wait"] = "5 minutes"
    with pytest.raises(ValidationError, match="5 minutes"):
        AlertingConfig.model_validate(data)
    data = example()
    data["environment"] = "dev"
    with pytest.raises(ValidationError, match="environment"):
        AlertingConfig.model_validate(data)


def test_durations_and_matchers() -> None:
    assert (
        parse_duration("1h30m") == 5400
        and parse_duration(15) == 15
        and parse_duration("250ms") == 0.25
    )
    m = parse_matcher('model=~"digits-.*"')
    assert m.matches({"model": "digits-small"}) and not m.matches(
        {"model": "xdigits-small"}
    )  # anchored
    assert parse_matcher("team!=db").matches({})  # a missing label is ""
    with pytest.raises(ValueError, match="bad regex"):
        parse_matcher('a=~"("')


def test_alert_fingerprint_matches_prometheus() -> None:
    # The empty label set hashes to the FNV-1a 64 offset basis, as in Prometheus.
    assert fingerprint({}) == "cbf29ce484222325"
    a = Alert.create("X", "p2", "prod", labels={"model": "m"}, starts_at=1.0)
    assert a.severity is Severity.P2 and a.environment == "prod"
    assert (
        a.fingerprint
        == Alert.create("X", "P2", "prod", labels={"model": "m"}, starts_at=9.0).fingerprint
    )
    assert Alert.from_dict(a.to_dict()) == a
    with pytest.raises(ValueError, match="unknown alert field"):
        Alert.from_dict({"labels": {"alertname": "X"}, "oops": 1})
    with pytest.raises(ValueError, match="severity"):
        Alert.create("X", "P5", "prod", starts_at=0)
    assert (
        Severity.P1.cap(Severity.P3) is Severity.P3 and Severity.P4.cap(Severity.P3) is Severity.P4
    )
