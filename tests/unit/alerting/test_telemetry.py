"""Telemetry: instruments and attributes, Prometheus exposition, the Grafana dashboard's queries."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from alerting._private.histograms import HistogramCollector, LabelledHistogram
from alerting.telemetry import Telemetry
from pool import DeviceCounters

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
    sample = DeviceCounters(
        device="cuda:0", replica="r1", swaps_in=3, swaps_out=2, swap_bytes=3 << 20,
        swap_seconds=0.25, evictions=2, preemptions=(1, 0, 0, 0), queue_depth=(0, 4, 9, 0),
        memory_used_bytes=6 << 20, memory_free_bytes=2 << 20, memory_total_bytes=8 << 20,
        host_used_bytes=20 << 20, resident=(("digits@1", 6 << 20),), hosted=("a@1", "b@1"),
        batches=7, compute_seconds=1.5)
    t.observe_devices(lambda: [("gpu", sample)], lambda: {"gpu": 1})
    t.observe_breakers(lambda: {("digits", "gpu"): "open"})
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
    assert set(metrics) == {  # the per-request histograms are Timeshare's own (below)
        "timeshare.swaps",
        "timeshare.swap",
        "timeshare.swap.duration",
        "timeshare.batches",
        "timeshare.compute.duration",
        "timeshare.preemptions",
        "timeshare.evictions",
        "timeshare.queue.depth",
        "timeshare.device.memory.usage",
        "timeshare.device.memory.limit",
        "timeshare.host.memory.usage",
        "timeshare.models.resident",
        "timeshare.pool.replica.restarts",
        "timeshare.breaker.state",
        "timeshare.alerts.sent",
        "timeshare.alerts.dropped",
    }
    points = t.requests.snapshot()
    assert sorted((p.labels["served_by"], p.labels["degraded"], p.count) for p in points) == [
        ("digits-small", "false", 1), ("rules", "true", 1)]
    (queued,) = t.queue_delays.snapshot()
    assert queued.labels == {"model": "digits", "priority": "realtime", "device": "cuda:0"}
    (breaker,) = metrics["timeshare.breaker.state"].data.data_points
    assert breaker.value == 2
    depth = {dict(p.attributes)["priority"]: p.value
             for p in metrics["timeshare.queue.depth"].data.data_points}
    assert depth == {"realtime": 0, "interactive": 4, "batch": 9, "background": 0}
    swaps = {dict(p.attributes)["direction"]: p.value
             for p in metrics["timeshare.swaps"].data.data_points}
    assert swaps == {"in": 3, "out": 2}
    (span,) = t.span_exporter.get_finished_spans()
    assert span.name == "dispatch" and dict(span.attributes) == {
        "model": "digits",
        "served_by": "digits-small",
    }
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
    series = {(name, frozenset(re.findall(r'(\w+)="([^"]*)"', labels))): float(value)
              for name, labels, value in re.findall(
                  r"^(timeshare_\w+)\{([^}]*)\} (\S+)$", text, flags=re.MULTILINE)}

    def value(name: str, **labels: str) -> float:
        (v,) = [v for (n, ls), v in series.items() if n == name and set(labels.items()) <= ls]
        return v

    replica = {"pool": "gpu", "device": "cuda:0", "replica": "r1"}
    assert value("timeshare_swaps_total", direction="in", **replica) == 3
    assert value("timeshare_swap_bytes_total", **replica) == 3 << 20
    assert value("timeshare_swap_duration_seconds_total", **replica) == 0.25
    assert value("timeshare_batches_total", **replica) == 7
    assert value("timeshare_compute_duration_seconds_total", **replica) == 1.5
    assert value("timeshare_preemptions_total", priority="realtime", **replica) == 1
    assert value("timeshare_evictions_total", **replica) == 2
    assert value("timeshare_queue_depth", priority="batch", **replica) == 9
    assert value("timeshare_device_memory_usage_bytes", state="free", **replica) == 2 << 20
    assert value("timeshare_device_memory_limit_bytes", **replica) == 8 << 20
    assert value("timeshare_host_memory_usage_bytes", **replica) == 20 << 20
    assert value("timeshare_models_resident", tier="host", **replica) == 2
    assert value("timeshare_pool_replica_restarts_total", pool="gpu") == 1
    assert 'le="0.01"' in text  # seconds buckets, not the millisecond defaults
    assert not any(name.startswith(("ray_serve", "serve_")) for name in exported)
    t.shutdown()
    assert "timeshare_" not in generate_latest(registry).decode()  # collector unregistered



def test_histogram_buckets_hold_their_upper_bound_and_export_cumulatively() -> None:
    h = LabelledHistogram("x_seconds", "x", ("model",), (0.01, 0.1))
    for v in (0.005, 0.01, 0.05, 0.1, 0.5):  # a value on a bound falls in that bound's bucket
        h.record(v, ("m",))
    h.record(0.2, ("n",))
    for bad in (float("nan"), float("inf"), -0.1):  # dropped, as the SDK drops them
        h.record(bad, ("m",))
    by = {p.labels["model"]: p for p in h.snapshot()}
    assert (by["m"].counts, by["m"].count) == ((2, 2, 1), 5)
    assert by["m"].sum == pytest.approx(0.665)
    assert (by["n"].counts, by["n"].count) == ((0, 0, 1), 1)
    with pytest.raises(ValueError, match="1 label values expected"):
        h.record(0.1, ("m", "extra"))
    with pytest.raises(ValueError, match="increasing"):
        LabelledHistogram("y", "y", ("model",), (0.1, 0.01))
    registry = CollectorRegistry()
    registry.register(HistogramCollector([h]))
    text = generate_latest(registry).decode()
    scope = 'otel_scope_name="timeshare",otel_scope_schema_url="",otel_scope_version=""'
    for le, n in (("0.01", 2), ("0.1", 4), ("+Inf", 5)):
        assert f'x_seconds_bucket{{le="{le}",model="m",{scope}}} {n}.0' in text, text
    assert f'x_seconds_count{{model="m",{scope}}} 5.0' in text
    assert f'x_seconds_sum{{model="m",{scope}}} 0.665' in text


def test_histograms_are_exported_only_with_prometheus() -> None:
    registry = CollectorRegistry()
    on, off = Telemetry(prometheus=True, registry=registry), Telemetry()
    assert (on.histograms_exported, off.histograms_exported) == (True, False)
    off.record_request(model="m", route="", served_by="m", cache="miss", degraded=False,
                       duration_s=0.01)
    assert [p.count for p in off.requests.snapshot()] == [1]  # readable in process all the same
    on.shutdown()
    off.shutdown()


def test_two_exporting_telemetries_can_share_a_registry() -> None:
    registry = CollectorRegistry(auto_describe=True)  # as prometheus_client's global one
    first, second = (Telemetry(prometheus=True, registry=registry) for _ in range(2))
    first.shutdown()
    second.shutdown()
