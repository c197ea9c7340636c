"""Load-test config schema and the seeded send plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from deploy.loadtest import LoadTestConfig, load_config
from deploy.loadtest._private.plan import arrival_offsets, build_plan

DEMO = Path(__file__).resolve().parents[3] / "deploy" / "loadtest" / "demo.yaml"


def raw(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "target": {"url": "http://127.0.0.1:8000"},
        "models": [{"name": "a", "weight": 3}, {"name": "b", "weight": 1}],
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                    "random": {"low": 0, "high": 16}}],
        "arrival": {"process": "poisson", "rate": 100, "seed": 1},
        "duration_s": 10,
        "warmup_s": 2,
    }
    base.update(over)
    return base


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_demo_config_is_valid_and_as_specified() -> None:
    cfg = load_config(DEMO)
    assert cfg.target.url == "http://127.0.0.1:8000"
    assert [(m.name, m.weight) for m in cfg.models] == [
        ("digits-small", 3), ("digits-large", 1), ("digits", 2)]
    (inp,) = cfg.inputs or []
    assert (inp.name, inp.datatype, inp.shape) == ("pixels", "FP32", (1, 64))
    assert inp.random is not None and (inp.random.low, inp.random.high) == (0, 16)
    assert (cfg.arrival.process, cfg.arrival.rates) == ("poisson", [10, 20, 40])
    assert (cfg.duration_s, cfg.warmup_s, cfg.slo.p99_ms) == (15, 3, 500)


@pytest.mark.parametrize("bad, needle", [
    ({"arrivals": {}}, "arrivals: unknown key"),
    ({"arrival": {"process": "poisson"}}, "exactly one of rate or rates"),
    ({"arrival": {"rates": [20, 10]}}, "increasing, got [20.0, 10.0]"),
    ({"arrival": {"rate": 5, "process": "burst"}}, "arrival.process"),
    ({"target": {"url": "127.0.0.1:8000"}}, ("must start with http:// (the generator speaks "
     "plain HTTP/1.1), got '127.0.0.1:8000'")),
    ({"target": {"url": "https://x"}}, "got 'https://x'"),
    ({"target": {"url": "http://x", "app": "timeshare"}}, "exactly one of url, grpc or app"),
    ({"target": {}}, "exactly one of url, grpc or app"),
    ({"workers": 0}, "workers: Input should be greater than or equal to 1"),
    ({"priorities": {"urgent": 1}}, "priorities.urgent"),
    ({"callers": {"a": 0}}, "weights must be positive, got {'a': 0.0}"),
    ({"inputs": None}, "models ['a', 'b'] have no inputs"),
    ({"inputs": [{"name": "x", "datatype": "FP33", "shape": [1]}]}, "datatype must be one of"),
    ({"inputs": [{"name": "x"}]}, "input 'x': shape is required"),
    ({"slo": {"p99ms": 3}}, "slo.p99ms: unknown key"),
])
def test_bad_config_names_the_field(tmp_path: Path, bad: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError) as e:
        load_config(write(tmp_path, raw(**bad)))
    assert needle in str(e.value)
    assert "c.yaml" in str(e.value)


def test_poisson_offsets_have_the_rate_and_exponential_gaps() -> None:
    rng = np.random.default_rng(0)
    t = arrival_offsets("poisson", 200.0, 50.0, rng)
    assert t.min() >= 0 and t.max() < 50 and np.all(np.diff(t) > 0)
    assert len(t) == pytest.approx(10_000, rel=0.05)  # 5 sigma is ~5%
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.05)
    assert gaps.std() == pytest.approx(1 / 200, rel=0.1)  # exponential: sd == mean
    const = arrival_offsets("constant", 4.0, 1.0, rng)
    assert const.tolist() == [0.0, 0.25, 0.5, 0.75]


def test_plan_is_seeded_weighted_and_marks_warmup() -> None:
    cfg = LoadTestConfig.model_validate(raw(priorities={"batch": 1, "realtime": 1},
                                            callers={"x": 1, "y": 3}))
    plan, again = build_plan(cfg, 100.0), build_plan(cfg, 100.0)
    assert [p.offset_s for p in plan] == [p.offset_s for p in again]
    assert [p.request.model for p in plan] == [p.request.model for p in again]
    assert all(p.measured == (p.offset_s >= 2.0) for p in plan)
    share_a = np.mean([p.request.model == "a" for p in plan])
    assert share_a == pytest.approx(0.75, abs=0.04)
    assert {p.request.priority for p in plan} == {"batch", "realtime"}
    assert np.mean([p.request.caller == "y" for p in plan]) == pytest.approx(0.75, abs=0.04)
    arr = plan[0].request.inputs["x"][1]
    assert arr.shape == (1, 4) and arr.dtype == np.float32
    vals = np.concatenate([p.request.inputs["x"][1].ravel() for p in plan])
    assert vals.min() >= 0 and vals.max() < 16
    other_rate = build_plan(cfg, 100.0, run_index=1)
    assert [p.offset_s for p in other_rate] != [p.offset_s for p in plan]


def test_payloads_from_npy_and_json_files(tmp_path: Path) -> None:
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float64).reshape(3, 4))
    (tmp_path / "y.json").write_text(json.dumps([[1, 2], [3, 4]]))
    data = raw(models=[{"name": "a", "inputs": [
        {"name": "x", "datatype": "FP32", "shape": [1, 4], "file": "x.npy"},
        {"name": "y", "datatype": "INT64", "file": "y.json"},
    ]}])
    data.pop("inputs")
    cfg = load_config(write(tmp_path, data))  # relative files resolve next to the config
    plan = build_plan(cfg, 50.0)
    xs = {tuple(p.request.inputs["x"][1].ravel()) for p in plan}
    assert xs == {(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11)}
    y = plan[0].request.inputs["y"]
    assert y[0] == "INT64" and y[1].dtype == np.int64 and y[1].shape == (2,)


def test_bad_payload_file_names_the_input(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")
    data = raw(inputs=[{"name": "x", "file": "x.json"}])
    cfg = load_config(write(tmp_path, data))
    with pytest.raises(ValueError, match=r"inputs\.x\.file .*non-empty JSON list"):
        build_plan(cfg, 10.0)
