"""What the status views read: the page's static files, per-model stats and device counters."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.app import ADMIN_KEY

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def test_the_page_is_static_same_origin_and_needs_no_key(client):
    page = await client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp
    assert 'src="ui/app.js"' in page.text and "http" not in page.text.split("<body>")[1]
    for asset, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
        r = await client.get(f"/ui/{asset}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
    assert "v2/status" in (await client.get("/ui/app.js")).text
    assert (await client.get("/ui/config.yaml")).status_code == 404
    assert (await client.get("/v2/status")).status_code == 401  # the data needs the key


async def test_status_carries_per_model_stats_and_device_bytes(client, ingress):
    x = np.zeros((1, 4), np.float32)
    body = {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32",
                        "data": x.reshape(-1).tolist()}]}
    for _ in range(3):
        assert (await client.post("/v2/models/iris-mlp1x16/infer", json=body)).status_code == 200
    status = (await client.get("/v2/status", headers={"X-API-Key": ADMIN_KEY})).json()
    m = status["models"]["iris-mlp1x16"]
    assert m["requests"] >= 3 and m["rate_per_s"] > 0 and m["p99_ms"] > 0
    assert m["cache_hit_share"] > 0  # the same input again: the result cache answered
    assert status["firing_alerts"] == []
    device = status["pools"]["cpu"]["device"]
    assert set(device["resident_bytes"]) == set(device["resident"])
    assert all(b > 0 for b in device["resident_bytes"].values())
    assert set(device["preemptions_by"]) == {"realtime", "interactive", "batch", "background"}
    counters = await ingress._pools["cpu"].counters()
    assert counters.replica and counters.memory_total_bytes == device["memory"]["total_bytes"]
    assert {k for k, _ in counters.resident} == set(device["resident"])
