"""What the ingress records per request: the alert counters, the call log and /v2/status
always; Timeshare's request histograms only when something collects them."""

from __future__ import annotations

import pytest

from router._private.recorders import CallLogRecorder, CounterRecorder, TelemetryRecorder

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def test_no_metrics_port_no_request_histograms(ingress, client) -> None:
    assert ingress.settings.prometheus_port is None
    assert not ingress.telemetry.histograms_exported
    kinds = {type(r) for r in ingress.pipeline._recorders}
    assert TelemetryRecorder not in kinds
    assert {CounterRecorder, CallLogRecorder, type(ingress.model_stats)} <= kinds
    before = sum(c.requests for c in ingress.counters.snapshot().values())
    r = await client.post("/v2/models/digits-small/infer", json={
        "inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "FP32",
                    "data": [0.0] * 64}]})
    assert r.status_code == 200, r.text
    assert sum(c.requests for c in ingress.counters.snapshot().values()) == before + 1
