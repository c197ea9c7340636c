"""Model config schema, repository scanning and loading: no Ray."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import torch
import yaml

from pool.config import ModelConfig
from pool.errors import ModelLoadError
from pool.loader import load_module
from pool.repository import ModelRepository, read_config, version_order


def _cfg(**over):
    base = {
        "name": "m",
        "inputs": [{"name": "x", "dtype": "FP32", "shape": [4]}],
        "outputs": [{"name": "y", "dtype": "FP32", "shape": [2]}],
    }
    base.update(over)
    return base


def test_config_defaults_and_priority_parsing():
    c = ModelConfig.model_validate(_cfg(priority="realtime"))
    assert c.max_batch_size == 32 and c.device == "any" and c.cache.mode == "exact"
    assert c.priority.label == "realtime"


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"inputs": [{"name": "x", "dtype": "FLOAT", "shape": [4]}]}, "dtype must be one of"),
        ({"inputs": [{"name": "x", "dtype": "FP32", "shape": [0]}]}, "positive or -1"),
        ({"priority": "urgent"}, "priority must be one of realtime"),
        ({"max_batch_size": 0}, "greater than or equal to 1"),
        ({"format": "safetensors"}, "needs 'architecture'"),
        ({"fallback": [{"kind": "model"}]}, "kind=model needs 'model'"),
        ({"colour": "red"}, "Extra inputs are not permitted"),
    ],
)
def test_config_errors_name_the_problem(over, needle):
    with pytest.raises(ValueError, match=needle):
        ModelConfig.model_validate(_cfg(**over))


def test_version_order_is_numeric():
    assert sorted(["10", "2", "1", "beta"], key=version_order) == ["beta", "1", "2", "10"]


def test_scan_lists_models_and_versions(demo_repo):
    snap = ModelRepository(demo_repo, settle_s=0).scan()
    assert {"digits-small", "digits-large", "iris-mlp1x16", "iris-mlp2x16"} <= set(snap.models)
    entry = snap.entry("digits-small")
    assert entry.error is None and [v.version for v in entry.versions] == ["1"]
    assert entry.config.metadata["test_accuracy"] > 0.9


def test_malformed_config_is_reported_with_file_and_field_and_hides_only_that_model(demo_repo):
    path = demo_repo / "iris-mlp1x16" / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["max_batch_size"] = "lots"
    path.write_text(yaml.safe_dump(raw))
    snap = ModelRepository(demo_repo, settle_s=0).scan()
    bad = snap.entry("iris-mlp1x16")
    assert bad.config is None
    assert "iris-mlp1x16/config.yaml" in bad.error and "[max_batch_size]" in bad.error
    assert snap.entry("digits-small").error is None


def test_invalid_yaml_and_name_mismatch(demo_repo):
    (demo_repo / "iris-mlp1x16" / "config.yaml").write_text("inputs: [unclosed")
    with pytest.raises(ModelLoadError, match="not valid YAML"):
        read_config(demo_repo / "iris-mlp1x16")
    shutil.copytree(demo_repo / "digits-small", demo_repo / "digits-copy")
    with pytest.raises(ModelLoadError, match=r"\[name\].*does not match folder"):
        read_config(demo_repo / "digits-copy")


def test_version_still_being_written_is_not_listed(demo_repo):
    clock = [time.time()]
    shutil.copytree(demo_repo / "digits-small" / "1", demo_repo / "digits-small" / "2")
    # version 1 was written long ago (the session's demo repository may be seconds old when this
    # runs first), version 2 just now
    os.utime(demo_repo / "digits-small" / "1" / "model.pt", (clock[0] - 60, clock[0] - 60))
    os.utime(demo_repo / "digits-small" / "2" / "model.pt", (clock[0], clock[0]))
    repo = ModelRepository(demo_repo, settle_s=5, clock=lambda: clock[0])
    assert [v.version for v in repo.scan().entry("digits-small").versions] == ["1"]
    clock[0] += 10
    assert [v.version for v in repo.scan().entry("digits-small").versions] == ["1", "2"]


def test_load_torchscript_and_safetensors(demo_repo):
    for name in ("digits-small", "iris-mlp2x16"):
        cfg = read_config(demo_repo / name)
        module = load_module(demo_repo / name / "1", cfg)
        n = cfg.inputs[0].shape[0]
        out = module(torch.zeros(3, n))
        assert out.shape == (3, cfg.outputs[0].shape[0])


def test_corrupt_weights_are_refused_with_the_file(demo_repo):
    cfg = read_config(demo_repo / "digits-small")
    # (not b"\x80\x04...": that is a pickle's header, refused as a pickle before any load)
    (demo_repo / "digits-small" / "1" / "model.pt").write_bytes(b"\x00\x04not a model")
    with pytest.raises(ModelLoadError, match=r"model\.pt \[format\]: not a TorchScript archive"):
        load_module(demo_repo / "digits-small" / "1", cfg)
    scfg = read_config(demo_repo / "iris-mlp2x16")
    (demo_repo / "iris-mlp2x16" / "1" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(ModelLoadError, match="not a safetensors file"):
        load_module(demo_repo / "iris-mlp2x16" / "1", scfg)


def test_safetensors_architecture_mismatch_names_the_field(demo_repo):
    path = demo_repo / "iris-mlp2x16" / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["architecture_kwargs"]["hidden"] = [8, 8]
    path.write_text(yaml.safe_dump(raw))
    cfg = read_config(demo_repo / "iris-mlp2x16")
    with pytest.raises(ModelLoadError, match=r"\[architecture_kwargs\]"):
        load_module(demo_repo / "iris-mlp2x16" / "1", cfg)


def test_demo_large_beats_small_on_held_out_split(demo_repo):
    small = read_config(demo_repo / "digits-small").metadata["test_accuracy"]
    large = read_config(demo_repo / "digits-large").metadata["test_accuracy"]
    assert large > small + 0.01
