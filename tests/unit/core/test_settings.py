"""App settings: overlays per environment, unknown keys named."""

from __future__ import annotations

import pytest

from router.settings import load_settings


@pytest.mark.parametrize("env, replicas, alert_env", [
    ("test", 1, "test"), ("staging", 2, "staging"), ("prod", 2, "prod")])
def test_shipped_overlays_load_and_differ(env, replicas, alert_env):
    from alerting.config import load_config

    s = load_settings({"repository": "var/model_repository", "environment": env})
    assert s.cpu_pool.replicas == replicas
    assert load_config(s.alerting).environment == alert_env


def test_args_win_over_the_overlay_key_by_key(tmp_path):
    (tmp_path / "test.yaml").write_text("cpu_pool: {replicas: 3, memory_budget_mb: 64}\n")
    s = load_settings({"repository": "r", "cpu_pool": {"replicas": 5}}, env_dir=tmp_path)
    assert (s.cpu_pool.replicas, s.cpu_pool.memory_budget_mb) == (5, 64)


def test_unknown_key_in_an_overlay_is_named(tmp_path):
    (tmp_path / "staging.yaml").write_text("cpu_pool: {replicaz: 3}\n")
    with pytest.raises(ValueError, match=r"staging\.yaml.*cpu_pool\.replicaz"):
        load_settings({"repository": "r", "environment": "staging"}, env_dir=tmp_path)


def test_unknown_environment_and_top_level_key(tmp_path):
    with pytest.raises(ValueError, match="environment"):
        load_settings({"repository": "r", "environment": "qa"}, env_dir=tmp_path)
    with pytest.raises(ValueError, match="colour"):
        load_settings({"repository": "r", "colour": "red"}, env_dir=tmp_path)
