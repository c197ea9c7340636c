"""Caller keys from an environment variable (``caller_keys_env``): how a Kubernetes Secret
reaches the app without the keys in its Serve config (deploy/k8s.py)."""

from __future__ import annotations

import json

import httpx
import pytest

from router.settings import load_settings
from tests.support.app import start_ingress, stop_ingress
from tests.support.errors import assert_error
from tests.support.v2 import digits_body as body

VAR = "TIMESHARE_TEST_CALLER_KEYS"
KEYS = {"k8s-key-ops": "team-ops", "k8s-key-web": "team-web"}


def _settings(**args):
    return load_settings({"repository": "/nonexistent", **args})


def test_keys_come_from_the_variable(monkeypatch):
    monkeypatch.setenv(VAR, json.dumps(KEYS))
    assert _settings(caller_keys_env=VAR).resolved_caller_keys() == KEYS


def test_unset_variable_or_setting_means_no_caller_keys(monkeypatch):
    monkeypatch.delenv(VAR, raising=False)
    assert _settings(caller_keys_env=VAR).resolved_caller_keys() is None
    monkeypatch.setenv(VAR, json.dumps(KEYS))
    assert _settings().resolved_caller_keys() is None  # not named: not read


def test_keys_in_the_args_win(monkeypatch):
    monkeypatch.setenv(VAR, json.dumps(KEYS))
    own = {"arg-key": "team-args"}
    assert _settings(caller_keys=own, caller_keys_env=VAR).resolved_caller_keys() == own


@pytest.mark.parametrize("raw, why", [
    ("k8s-key-ops=team-ops", "not a JSON object"),
    ('["k8s-key-ops"]', "expected a non-empty JSON object"),
    ("{}", "expected a non-empty JSON object"),
    ('{"k8s-key-ops": 7}', "entry 0 needs"),
    ('{"k8s-key-ops": "team-ops", "": "team-web"}', "entry 1 needs"),
])
def test_a_malformed_value_names_the_variable_and_never_echoes_it(monkeypatch, raw, why):
    monkeypatch.setenv(VAR, raw)
    with pytest.raises(ValueError, match=why) as e:
        _settings(caller_keys_env=VAR).resolved_caller_keys()
    assert f"caller_keys_env: ${VAR}" in str(e.value)
    assert "k8s-key-ops" not in str(e.value)


async def test_the_ingress_identifies_callers_by_the_variables_keys(
        demo_repo_master, tmp_path, monkeypatch):
    monkeypatch.setenv(VAR, json.dumps(KEYS))
    ing = await start_ingress({
        "repository": str(demo_repo_master), "state_dir": str(tmp_path / "state"),
        "caller_keys_env": VAR, "cpu_pool": {"placement": "ingress", "memory_budget_mb": 256},
        "call_log": {"path": str(tmp_path / "calls.jsonl")}, "default_deadline_ms": 5000,
    }, ready=("digits-small",))
    try:
        transport = httpx.ASGITransport(app=ing.__serve_build_asgi_app__())
        async with httpx.AsyncClient(transport=transport, base_url="http://timeshare") as c:
            url = "/v2/models/digits-small/infer"
            r = await c.post(url, json=body(), headers={"X-API-Key": "k8s-key-ops"})
            assert r.status_code == 200, r.text
            p = r.json()["parameters"]
            assert (p["caller"], p["caller_verified"]) == ("team-ops", True)
            r = await c.post(url, json=body(caller="team-web"),
                             headers={"Authorization": "Bearer k8s-key-ops"})
            assert_error(r, 403, "caller")
    finally:
        await stop_ingress(ing)
