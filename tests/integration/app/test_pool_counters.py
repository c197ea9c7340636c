"""Each pool replica reports its device counters across the handle, with its replica rank."""

from __future__ import annotations

from pool import DeviceCounters


def test_a_pool_replica_reports_its_counters_and_rank(app, http):
    from ray import serve

    body = {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32",
                        "data": [5.1, 3.5, 1.4, 0.2]}], "parameters": {"cache_skip_read": True}}
    assert http.post("/v2/models/iris-mlp1x16/infer", json=body).status_code == 200
    handle = serve.get_deployment_handle("CPUPool", app_name="timeshare")
    c = handle.counters.remote().result(timeout_s=30)
    assert isinstance(c, DeviceCounters)
    assert c.replica and c.slot == 0  # one replica: rank 0
    assert c.memory_total_bytes == 512 << 20 and c.host_used_bytes > 0
    assert any(k.startswith("iris-mlp1x16@") for k, _ in c.resident)
