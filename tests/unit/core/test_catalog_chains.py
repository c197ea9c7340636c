"""Fallback chains compile when a model's config arrives, not on the request path."""

from __future__ import annotations

import pytest

from alerting import RulesConfig
from alerting.rules import MetricsSnapshot, RuleEvaluator
from pool.config import ModelConfig
from pool.host import ModelIndexEntry, VersionState
from router.catalog import ModelCatalog
from router.errors import ModelNotFound

IO = {"inputs": [{"name": "x", "dtype": "FP32", "shape": [2]}],
      "outputs": [{"name": "y", "dtype": "FP32", "shape": [1]}]}


def _entry(name: str, fallback: list[dict]) -> ModelIndexEntry:
    cfg = ModelConfig.model_validate({"name": name, **IO, "fallback": fallback})
    return ModelIndexEntry(name, cfg, "1", {"1": VersionState("ready")})


BAD_RULE = [{"kind": "rules", "rules": [{"name": "r", "type": "regex", "pattern": "(",
                                         "outputs": {"y": [[1.0]]}}]}]
GOOD = [{"kind": "default", "outputs": {"y": [[0.0]]}}]


async def test_bad_rule_marks_the_model_failed_at_load_with_the_reason():
    fetched = {"bad": _entry("bad", BAD_RULE), "good": _entry("good", GOOD)}
    calls = []

    async def fetch():
        calls.append(1)
        return fetched

    cat = ModelCatalog(fetch)
    await cat.refresh()
    bad = cat.snapshot()["bad"]
    assert not bad.ready and "fallback chain" in bad.error and "pattern" in bad.error
    assert all(v.state == "failed" for v in bad.versions.values())
    with pytest.raises(ModelNotFound, match="failed to load") as e:
        await cat.resolve("bad", None)
    assert e.value.field == "model"
    assert cat.chain("good")[0].kind == "default"
    entry, version = await cat.resolve("good", None)
    assert version == "1"
    assert set(cat.failed_models()) == {"bad"}
    assert "fallback chain" in cat.failed_models()["bad"]
    # The model-load-failure alert fires for it.
    alerts = RuleEvaluator(RulesConfig(), "prod").evaluate(
        MetricsSnapshot(at=0.0, failed_models=cat.failed_models()))
    assert any(a.labels.get("model") == "bad" for a in alerts)


async def test_chain_is_compiled_once_per_config():
    entry = _entry("m", GOOD)

    async def fetch():
        return {"m": entry}

    cat = ModelCatalog(fetch)
    await cat.refresh()
    first = cat.chain("m")
    await cat.refresh()
    assert cat.chain("m") is first
