"""Telemetry: instruments and attributes, Prometheus exposition, the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from alerting.telemetry import Telemetry

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "timeshare.json"


def record_everything(t: Telemetry) -> None:
    t.record_request(
        model="digits",
        route="digits-route",
        served_by="digits-small",
        cache="miss",
        degraded=False,
        duration_s=0.012,
    )
    t.record_request(
        model="digits",
        route="digits-route",
        served_by="rules",
        cache="miss",
        degraded=True,
        duration_s=0.002,
    )
    t.record_queue_delay(model="digits", priority="realtime", device="cuda:0", delay_s=0.003)
    t.record_swap(model="digits", device="cuda:0", direction="in")
    t.record_preemption(device="cuda:0", priority="batch")
    t.set_breaker_state(model="digits", pool="gpu", state="open")
    t.record_alert_sent(receiver="pager", channel="pagerduty", severity="P1", outcome="ok")
    t.record_alert_dropped(channel="team/slack/0")


def test_in_memory_reader_sees_attributes_and_spans() -> None:
    t = Telemetry.in_memory()
    record_everything(t)
    with t.span("dispatch", model="digits") as s:
        s.set_attribute("served_by", "digits-small")
    metrics = {
        m.name: m
        for rm in t.metric_reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert set(metrics) == {
        "timeshare.request.duration",
        "timeshare.queue.delay",
        "timeshare.swaps",
        "timeshare.preemptions",
        "timeshare.breaker.state",
        "timeshare.alerts.sent",
        "timeshare.alerts.dropped",
    }
    points = metrics["timeshare.request.duration"].data.data_points
    assert sorted(
        (dict(p.attributes)["served_by"], dict(p.attributes)["degraded"], p.count) for p in points
    ) == [("digits-small", "false", 1), ("rules", "true", 1)]
    (breaker,) = metrics["timeshare.breaker.state"].data.data_points
    assert breaker.value == 2
    (span,) = t.span_exporter.get_finished_spans()
    assert span.name == "dispatch" and dict(span.attributes) == {
        "model": "digits",
        "served_by": "digits-small",
    }
    with pytest.raises(ValueError, match="half_open"):
        t.set_breaker_state(model="m", pool="gpu", state="ajar")
    t.shutdown()


def test_prometheus_exposition_covers_every_dashboard_query() -> None:
    registry = CollectorRegistry()
    t = Telemetry(prometheus=True, registry=registry)
    record_everything(t)
    text = generate_latest(registry).decode()
    exported = set(re.findall(r"^(timeshare_[a-z_]+)", text, flags=re.MULTILINE))
    dash = json.loads(DASHBOARD.read_text())
    queried = {
        name
        for p in dash["panels"]
        for target in p["targets"]
        for name in re.findall(r"\b(timeshare_[a-z_]+)", target["expr"])
    }
    assert queried, "the dashboard queries no timeshare metric"
    assert queried <= exported, (
        f"dashboard queries metrics nobody exports: {sorted(queried - exported)}"
    )
    assert 'le="0.01"' in text  # seconds buckets, not the millisecond defaults
    assert not any(name.startswith(("ray_serve", "serve_")) for name in exported)
    t.shutdown()
    assert "timeshare_" not in generate_latest(registry).decode()  # collector unregistered
