"""A text route and verified semantic caching through the real HTTP app, in-process (#18).

The ingress builds one shared MiniLM embedder for the text route and the semantic cache; the
route reads ``parameters.text``; ``/v2/status`` reports the verified mode's figures."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import pytest_asyncio
import yaml

from deploy.demo_data import load_splits
from router.routes import load_routes
from tests.support.app import start_ingress, stop_ingress
from tests.support.demo import SMALL_DEMO

ROOT = Path(__file__).resolve().parents[3]
KEY = "admin-key"
SCORER = ROOT / "deploy" / "assistant-text.text-router.safetensors"
SHIPPED = load_routes(ROOT / "deploy" / "text_routes.yaml")["assistant-text"]  # calibrated


def _body(x: np.ndarray, **params):
    body = {"inputs": [{"name": "pixels", "shape": list(x.shape), "datatype": "FP32",
                        "data": x.reshape(-1).tolist()}]}
    if params:
        body["parameters"] = params
    return body


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(demo_repo_master, tmp_path_factory):
    import shutil

    root = tmp_path_factory.mktemp("text-http")
    repo = root / "repo"
    shutil.copytree(demo_repo_master, repo)
    for m in ("digits-small", "digits-large"):  # semantic cache on for the route's models
        cfg = yaml.safe_load((repo / m / "config.yaml").read_text())
        cfg["cache"] = {"mode": "semantic", "ttl_s": 300}
        (repo / m / "config.yaml").write_text(yaml.safe_dump(cfg))
    ing = await start_ingress({
        "repository": str(repo), "state_dir": str(root / "state"), "api_key": KEY,
        "routes": [{"name": "ask", "strategy": "predictive", "cheap": "digits-small",
                    "expensive": "digits-large", "predictive_model": str(SCORER),
                    "threshold": SHIPPED.threshold}],
        "cache": {"semantic_dir": str(root / "sem"), "verify_max_error_rate": 0.05},
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 256},
        "call_log": {"path": str(root / "calls.jsonl")}, "default_deadline_ms": 5000,
    }, ready=tuple(SMALL_DEMO))
    transport = httpx.ASGITransport(app=ing.__serve_build_asgi_app__())
    async with httpx.AsyncClient(transport=transport, base_url="http://timeshare") as c:
        yield c, ing
    await stop_ingress(ing)


@pytest.mark.asyncio(loop_scope="module")
async def test_text_route_over_http_and_verified_status(client):
    http, ing = client
    x = load_splits("digits").test_x
    texts = ["How do I reset my password?", "Write a Python function that validates a sudoku "
             "board", "Can I cancel my subscription?"]
    decisions = []
    for i, text in enumerate(texts):
        r = await http.post("/v2/models/ask/infer", json=_body(x[i:i + 1], text=text))
        assert r.status_code == 200, r.text
        decisions.append(json.loads(r.json()["parameters"]["route"])["decision"])
    await ing.cache.drain()
    assert decisions == ["cheap", "expensive", "cheap"]  # the text decided, not the pixels
    assert ing.pipeline.route_runner._embedder is ing.cache._semantic._embedder  # one, shared
    assert ing.pipeline.route_runner._embedder.computed == len(texts)
    missing = await http.post("/v2/models/ask/infer", json=_body(x[:1]))
    assert missing.status_code == 400 and missing.json()["field"] == "text"
    status = (await http.get("/v2/status", headers={"X-API-Key": KEY})).json()
    verified = status["cache"]["verified"]
    assert verified["max_error_rate"] == 0.05
    assert verified["threshold"] is None  # cold start: nothing certified, nothing served
    assert set(verified) >= {"observed_error_rate", "verified_hits", "wrong_hits", "explored"}
