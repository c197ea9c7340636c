"""Hardening through the running app (Ray Serve proxy included): one error shape, routes as
virtual models, status behind the key, and hot reload that executes nothing from a config."""

from __future__ import annotations

import shutil

import numpy as np
import yaml

from tests.support.app import API_KEY
from tests.support.v2 import v2_body

KEY = {"X-API-Key": API_KEY}


def _error(r, status: int, field: str | None = None) -> None:
    assert r.status_code == status, r.text
    doc = r.json()
    assert set(doc) <= {"error", "type", "field"} and doc["error"] and doc["type"], doc
    if field is not None:
        assert doc.get("field") == field, doc


def test_errors_keep_the_app_shape_through_the_proxy(http):
    _error(http.get("/v2/nope"), 404, "path")
    _error(http.get("/v2/models/" + "m" * 5000), 400, "model")
    _error(http.post("/v2/models/" + "m" * 5000 + "/infer", json={}), 400, "model")
    _error(http.get("/v2/status"), 401)
    assert http.get("/v2/status", headers=KEY).status_code == 200


def test_routes_are_virtual_models(http):
    meta = http.get("/v2/models/digits")
    assert meta.status_code == 200 and meta.json()["platform"] == "timeshare_route"
    assert http.get("/v2/models/digits/ready").json() == {"ready": True}


def test_hot_reloaded_config_naming_subprocess_runs_nothing(app, http, tmp_path):
    canary = tmp_path / "canary"
    src = app.repo / "iris-mlp2x16"
    dst = app.repo / "evil-factory"
    cfg = yaml.safe_load((src / "config.yaml").read_text())
    cfg.update(name="evil-factory", architecture="subprocess:check_output",
               architecture_kwargs={"args": ["touch", str(canary)]})
    (dst / "1").mkdir(parents=True)
    shutil.copy(src / "1" / "model.safetensors", dst / "1" / "model.safetensors")
    (dst / "config.yaml").write_text(yaml.safe_dump(cfg))

    def refused() -> bool:
        rows = http.post("/v2/repository/index", headers=KEY).json()
        return any(r["name"] == "evil-factory" and "allowlist" in r.get("reason", "")
                   for r in rows)

    app.wait_for(refused, 30, "the repository scan to refuse evil-factory")
    rows = [r for r in http.post("/v2/repository/index", headers=KEY).json()
            if r["name"] == "evil-factory"]
    assert str(app.repo) not in str(rows)  # paths relative to the repository
    body = v2_body("features", np.ones((1, 4), dtype=np.float32))
    _error(http.post("/v2/models/evil-factory/infer", json=body), 404, "model")
    assert not canary.exists()
