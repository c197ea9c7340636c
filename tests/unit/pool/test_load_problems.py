"""Why a model or version is not serving: the pool's bookkeeping of refusals and failed loads.

A real ``ModelHost`` over a real ``DeviceWorker`` (CPU) and a repository of tiny TorchScript
models written here: each of the five kinds of failure ends in the index and in ``status()``
with its state, file and field, is logged as exactly one WARNING line however often the
repository is polled, and leaves a working version of the same model serving.
"""

from __future__ import annotations

import logging
import pickle
import shutil
import time

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from alerting.events import Severity
from alerting.metrics import MetricsSnapshot
from alerting.rules import RuleEvaluator
from alerting.rules_config import RulesConfig
from common.trust import TrustSettings
from deploy.load_problems import load_problems
from policies.priority import Priority
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.errors import ModelLoadError, ModelRefused
from pool.host import ModelHost
from pool.repository import ModelRepository
from pool.work import PoolWork
from router.catalog import ModelCatalog

CANARY_MODULE = "tests.unit.security.canary_import"
INPUTS = [{"name": "x", "dtype": "FP32", "shape": [16]}]
OUTPUTS = [{"name": "y", "dtype": "FP32", "shape": [4]}]


def _config(repo, name, **over):
    raw = {"name": name, "inputs": INPUTS, "outputs": OUTPUTS, "max_batch_size": 8,
           "batch_wait_ms": 0, **over}
    (repo / name).mkdir(parents=True, exist_ok=True)
    (repo / name / "config.yaml").write_text(yaml.safe_dump(raw))


def _scripted(repo, name, version, in_features=16):
    (repo / name / version).mkdir(parents=True)
    torch.manual_seed(int(version))
    m = nn.Sequential(nn.Linear(in_features, 4)).eval()
    torch.jit.script(m).save(str(repo / name / version / "model.pt"))


@pytest.fixture
def repo(tmp_path, canary):
    """``good`` v1 serves; v2 is a pickled archive, v3 a corrupt file; ``evil`` names a module
    outside the allowlist; ``bad`` has an invalid field; ``cold`` fails its warm-up."""
    root = tmp_path / "repo"
    _config(root, "good")
    _scripted(root, "good", "1")
    (root / "good" / "2").mkdir()
    torch.save(nn.Linear(16, 4), root / "good" / "2" / "model.pt")  # pickled, not TorchScript
    (root / "good" / "3").mkdir()
    (root / "good" / "3" / "model.pt").write_bytes(b"PK\x03\x04 not really a zip")
    _config(root, "evil", format="safetensors", architecture=f"{CANARY_MODULE}:fn")
    (root / "evil" / "1").mkdir()
    (root / "evil" / "1" / "model.safetensors").write_bytes(b"{}")
    _config(root, "bad", max_batch_size=0)
    _scripted(root, "bad", "1")
    _config(root, "cold")
    _scripted(root, "cold", "1", in_features=3)  # the config says 16 inputs
    return root


@pytest.fixture
async def host(repo):
    h = ModelHost(ModelRepository(repo, settle_s=0, trust=TrustSettings()),
                  DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20)))
    yield h
    await h.worker.close()


EXPECTED = {  # (model, version or None for the config): (state, file, field, reason says)
    ("evil", None): ("refused", "evil/config.yaml", "architecture",
                     "not in the operator's allowlist"),
    ("good", "2"): ("refused", "good/2/model.pt", "format", "pickled archive"),
    ("bad", None): ("failed", "bad/config.yaml", "max_batch_size", "greater than or equal to 1"),
    ("cold", "1"): ("failed", "cold/1/model.pt", "inputs", "warm-up failed"),
    ("good", "3"): ("failed", "good/3/model.pt", "format", "not a TorchScript archive"),
}


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name == "pool.host"]


async def _serves(host: ModelHost, model: str) -> str:
    now = time.time()
    reply = await host.run(PoolWork(model=model, version=None,
                                    inputs={"x": np.zeros((1, 16), np.float32)},
                                    priority=Priority.INTERACTIVE, deadline_at=now + 30,
                                    arrived_at=now))
    return reply.version


async def test_each_kind_of_failure_has_its_state_file_and_field(host, caplog):
    caplog.set_level(logging.INFO, logger="pool.host")
    await host.sync()
    index = host.index()
    got = {(name, version): st for name, e in index.items() for version, st in e.problems()}
    assert set(got) == set(EXPECTED)
    for where, (state, file, field, says) in EXPECTED.items():
        st = got[where]
        assert (st.state, st.file, field) == (state, file, st.field), where
        assert says in st.reason and st.reason.startswith(f"{file} [{field}]: "), st.reason
    # a working version of the same model keeps serving
    assert index["good"].state == "ready" and index["good"].default_version == "1"
    assert await _serves(host, "good") == "1"
    assert {n: index[n].state for n in ("evil", "bad", "cold")} == {
        "evil": "refused", "bad": "failed", "cold": "failed"}
    # status() carries the same, and the operator views read it from there
    models = host.status()["models"]
    assert models["evil"]["state"] == "refused" and models["evil"]["default_version"] is None
    assert models["evil"]["problem"] == {
        "state": "refused", "reason": got["evil", None].reason, "file": "evil/config.yaml",
        "field": "architecture"}
    assert models["good"]["versions"]["2"]["file"] == "good/2/model.pt"
    assert models["good"]["versions"]["1"] == {"state": "ready", "reason": None, "file": None,
                                              "field": None}
    listed = {(p.model, p.version): (p.state, p.file, p.field)
              for p in load_problems({"pools": {"cpu": {"models": models}}})}
    assert listed == {k: v[:3] for k, v in EXPECTED.items()}


async def test_one_warning_per_problem_not_per_poll(host, repo, caplog):
    caplog.set_level(logging.INFO, logger="pool.host")
    for _ in range(3):
        await host.sync()
    lines = _warnings(caplog)
    assert len(lines) == len(EXPECTED), lines
    assert any(line.startswith("model evil config refused: evil/config.yaml [architecture]")
               for line in lines), lines
    assert any(line.startswith("model good version 2 refused: good/2/model.pt [format]")
               for line in lines), lines
    # the same bytes touched again: the same failure, no new line
    (repo / "good" / "3" / "model.pt").write_bytes(b"PK\x03\x04 not really a zip")
    await host.sync()
    assert len(_warnings(caplog)) == len(EXPECTED)
    # a changed reason logs again, once
    _config(repo, "bad", max_batch_size=8, batch_wait_ms=-5)
    await host.sync()
    await host.sync()
    new = _warnings(caplog)[len(EXPECTED):]
    assert len(new) == 1 and new[0].startswith("model bad config failed: bad/config.yaml "
                                                "[batch_wait_ms]"), new


async def test_a_problem_goes_when_its_folder_goes_or_the_model_loads(host, repo, caplog):
    caplog.set_level(logging.INFO, logger="pool.host")
    await host.sync()


    shutil.rmtree(repo / "evil")
    shutil.rmtree(repo / "good" / "2")
    _config(repo, "bad")  # fixed: version 1 loads
    await host.sync()
    index = host.index()
    assert "evil" not in index and "2" not in index["good"].versions
    assert index["bad"].state == "ready" and index["bad"].problem is None
    assert index["good"].default_version == "1"
    resolved = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO
                and "no longer failed or refused" in r.getMessage()]
    assert sorted(resolved) == ["model bad config resolved: no longer failed or refused",
                                "model evil config resolved: no longer failed or refused",
                                "model good version 2 resolved: no longer failed or refused"]
    # the same problem coming back is logged again
    _config(repo, "bad", max_batch_size=0)
    await host.sync()
    assert _warnings(caplog)[-1].startswith("model bad config failed: bad/config.yaml")


async def test_a_refused_config_leaves_the_loaded_versions_serving(host, repo, canary):
    await host.sync()
    assert await _serves(host, "good") == "1"
    _config(repo, "good", format="safetensors", architecture=f"{CANARY_MODULE}:fn")
    await host.sync()
    entry = host.index()["good"]
    assert entry.problem is not None and entry.problem.state == "refused"
    assert entry.problem.file == "good/config.yaml" and entry.problem.field == "architecture"
    assert entry.state == "ready" and await _serves(host, "good") == "1"


async def test_the_alert_carries_the_reasons_at_p3_and_resolves(host, repo):
    await host.sync()

    async def fetch():
        return host.index()

    catalog = ModelCatalog(fetch)
    await catalog.refresh()
    failed = catalog.failed_models()
    assert set(failed) == {"evil", "good", "bad", "cold"}
    assert "version 2 refused: good/2/model.pt [format]" in failed["good"]
    assert "version 3 failed: good/3/model.pt [format]" in failed["good"]
    ev = RuleEvaluator(RulesConfig(), "prod")
    alerts = {a.labels["model"]: a for a in ev.evaluate(MetricsSnapshot(0.0,
                                                                       failed_models=failed))}
    evil = alerts["evil"]
    assert evil.name == "TimeshareModelLoadFailed" and evil.severity is Severity.P3
    assert "evil/config.yaml [architecture]" in evil.annotations["summary"]


    shutil.rmtree(repo / "evil")
    await host.sync()
    await catalog.refresh()
    out = ev.evaluate(MetricsSnapshot(1.0, failed_models=catalog.failed_models()))
    assert [a.labels["model"] for a in out if a.resolved_at(1.0)] == ["evil"]


def test_load_errors_cross_a_process_boundary_whole():
    for e in (ModelRefused("m/1/model.pt", "pickled", field="format"),
              ModelLoadError("m/config.yaml", "bad")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
        assert (back.path, back.field, back.detail, back.state) == (
            e.path, e.field, e.detail, e.state)
    assert ModelRefused("f", "x").state == "refused" and ModelLoadError("f", "x").state == "failed"


def test_the_operator_views_list_a_problem_once_whichever_pools_report_it():
    refused = {"state": "refused", "reason": "m/2/model.pt [format]: pickled",
               "file": "m/2/model.pt", "field": "format"}
    model = {"state": "ready", "default_version": "1",
             "versions": {"1": {"state": "ready", "reason": None, "file": None, "field": None},
                          "2": refused}}
    status = {"pools": {"cpu": {"models": {"m": model}}, "gpu": {"models": {"m": model}},
                        "down": {"error": "ActorDiedError"}}}
    [p] = load_problems(status)
    assert (p.model, p.version, p.state, p.file, p.field, p.pools) == (
        "m", "2", "refused", "m/2/model.pt", "format", ("cpu", "gpu"))
    assert p.describe() == "m version 2 refused: m/2/model.pt [format]: pickled"
