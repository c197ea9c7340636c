"""The repository is a trust boundary: only allowlisted code runs, and refusals execute nothing."""

from __future__ import annotations

import pytest
import yaml

from common.fallback_types import FallbackStep
from common.trust import ModuleAllowlist, TrustSettings, resolve_callable
from fallbacks import compile_chain
from fallbacks.rules import RuleConfigError, load_rules
from pool.errors import ModelLoadError
from pool.loader import load_module
from pool.repository import ModelRepository, read_config

CANARY_MODULE = "tests.unit.security.canary_import"


def _edit(repo, name, **over):
    path = repo / name / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    raw.update(over)
    path.write_text(yaml.safe_dump(raw))


def test_allowlist_matches_modules_and_submodules_only():
    allow = ModuleAllowlist(["pkg.models"])
    assert allow.allows("pkg.models") and allow.allows("pkg.models.mlp")
    assert not allow.allows("pkg") and not allow.allows("pkg.modelsx")
    assert not ModuleAllowlist().allows("os")


def test_resolve_refuses_before_importing(canary):
    with pytest.raises(ValueError, match="not in the operator's allowlist"):
        resolve_callable(f"{CANARY_MODULE}:fn", allow=ModuleAllowlist(["deploy"]))


def test_subprocess_architecture_is_refused_at_load_and_runs_nothing(demo_repo, canary):
    _edit(demo_repo, "iris-mlp2x16", architecture="subprocess:check_output",
          architecture_kwargs={"args": ["touch", str(canary)]})
    entry = ModelRepository(demo_repo).scan().entry("iris-mlp2x16")
    assert entry.config is None
    assert "[architecture]" in entry.error and "not in the operator's allowlist" in entry.error
    assert "subprocess" in entry.error
    assert str(demo_repo) not in entry.error  # paths are relative to the repository
    # The loader refuses too (defence in depth: a config validated before the check).
    cfg = read_config(demo_repo / "iris-mlp2x16", trust=TrustSettings(
        allowed_modules=("subprocess",)))
    with pytest.raises(ModelLoadError, match="not in the operator's allowlist"):
        load_module(demo_repo / "iris-mlp2x16" / "1", cfg)


@pytest.mark.parametrize("step", [
    {"kind": "rules", "callable": f"{CANARY_MODULE}:fn"},
    {"kind": "rules", "rules": [{"name": "py", "type": "callable",
                                 "function": f"{CANARY_MODULE}:fn"}]},
])
def test_rule_callable_outside_allowlist_is_refused_at_load(demo_repo, canary, step):
    _edit(demo_repo, "digits-small", fallback=[step])
    entry = ModelRepository(demo_repo).scan().entry("digits-small")
    assert entry.config is None and "not in the operator's allowlist" in entry.error
    assert "fallback[0]" in entry.error
    with pytest.raises(RuleConfigError, match="not in the operator's allowlist"):
        compile_chain([FallbackStep.model_validate(step)], allow=ModuleAllowlist(["deploy"]))
    with pytest.raises(RuleConfigError, match="not in the operator's allowlist"):
        load_rules([{"name": "py", "type": "callable", "function": f"{CANARY_MODULE}:fn"}])


def test_allowlisted_module_is_imported(demo_repo):
    trust = TrustSettings(allowed_modules=("deploy.demo_models", "tests.unit.fallbacks"))
    _edit(demo_repo, "digits-small", fallback=[
        {"kind": "rules", "callable": "tests.unit.fallbacks.rule_callables:answer"}])
    cfg = read_config(demo_repo / "digits-small", trust=trust)
    chain = compile_chain(cfg.fallback, allow=trust.allowlist)
    assert chain[0].kind == "rules"


def test_torchscript_can_be_disabled_by_the_operator(demo_repo):
    trust = TrustSettings(allow_torchscript=False)
    entry = ModelRepository(demo_repo, trust=trust).scan().entry("digits-small")
    assert entry.config is None and "trust.allow_torchscript" in entry.error
    assert ModelRepository(demo_repo, trust=trust).scan().entry("iris-mlp2x16").config is not None
    cfg = read_config(demo_repo / "digits-small")
    with pytest.raises(ModelLoadError, match="TorchScript is disabled"):
        load_module(demo_repo / "digits-small" / "1", cfg, trust=trust)


def test_load_errors_name_files_relative_to_the_repository(demo_repo):
    cfg = read_config(demo_repo / "digits-small")
    (demo_repo / "digits-small" / "1" / "model.pt").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError) as e:
        load_module(demo_repo / "digits-small" / "1", cfg)
    assert str(demo_repo) not in str(e.value)
    assert str(e.value).startswith("digits-small/1/model.pt")


def test_settings_reject_bad_module_names():
    with pytest.raises(ValueError, match="dotted module names"):
        TrustSettings(allowed_modules=("os; rm -rf",))
