"""Outcome log, predictive scorer training/storage, and the retrain/calibrate commands."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from deploy.routes_cli import calibrate_main, retrain_main
from policies.routing import make_strategy
from router.route_training import (
    load_scorer,
    needs_expensive,
    outcome_line,
    read_outcomes,
    save_scorer,
    train_scorer,
)
from router.routes import load_routes


def _synthetic_log(path, n=400, seed=0):
    """Cheap is wrong exactly when feature 3 is large; expensive is always right."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(size=(n, 4))
    y = rng.integers(0, 3, size=n)
    exp = np.eye(3)[y] * 5
    wrong = (y + 1) % 3
    cheap = np.where((x[:, 3] > 0.5)[:, None], np.eye(3)[wrong] * 2, np.eye(3)[y] * 2)
    with open(path, "w") as f:
        f.writelines(  # two rows per record
            outcome_line("digits", {"pixels": x[i:i + 2]}, cheap[i:i + 2], exp[i:i + 2],
                         labels=y[i:i + 2]) + "\n"
            for i in range(0, n, 2)
        )
        f.write(outcome_line("other", {"pixels": x[:1]}, cheap[:1], exp[:1]) + "\n")
    return x, y


def test_outcome_log_round_trip_and_filter(tmp_path):
    log = tmp_path / "o.jsonl"
    x, y = _synthetic_log(log)
    out = read_outcomes(log, route="digits")
    assert len(out) == 400 and np.allclose(out.inputs["pixels"], x)
    assert np.array_equal(out.labels, y)
    assert len(read_outcomes(log)) == 401 and read_outcomes(log).labels is None  # one unlabelled
    assert len(read_outcomes(log, max_rows=10)) == 10


def test_bad_outcome_line_is_named(tmp_path):
    log = tmp_path / "o.jsonl"
    log.write_text(outcome_line("d", {"pixels": [[1.0]]}, [[1.0, 0.0]], [[0.0, 1.0]]) + "\n{oops\n")
    with pytest.raises(ValueError, match="o.jsonl:2"):
        read_outcomes(log)
    log.write_text(outcome_line("d", {"pixels": [[1.0]]}, [[1.0, 0.0]], [[0.0, 1.0]]) + "\n")
    with pytest.raises(ValueError, match="no outcome records for route 'x'"):
        read_outcomes(log, route="x")


def test_needs_expensive_with_and_without_labels():
    cheap = np.array([[1, 0], [0, 1], [0, 1]], float)
    exp = np.array([[1, 0], [1, 0], [0, 1]], float)
    assert list(needs_expensive(cheap, exp)) == [False, True, False]
    assert list(needs_expensive(cheap, exp, np.array([0, 0, 0]))) == [False, True, False]
    assert list(needs_expensive(cheap, exp, np.array([0, 1, 0]))) == [False, False, False]


def test_trained_scorer_learns_the_signal_and_survives_storage(tmp_path):
    log = tmp_path / "o.jsonl"
    x, _ = _synthetic_log(log)
    scorer = train_scorer(read_outcomes(log, route="digits"))
    s = scorer.score({"pixels": x})
    hard = x[:, 3] > 0.5
    assert s[hard].max() < s[~hard].min() + 0.2
    assert s[hard].mean() < 0.3
    assert s[~hard].mean() > 0.7
    save_scorer(scorer, tmp_path / "s.safetensors")
    again = load_scorer(tmp_path / "s.safetensors")
    assert np.allclose(again.score({"pixels": x}), s)
    assert (tmp_path / "s.safetensors").read_bytes()[:8] != b"\x80\x04\x95"  # not a pickle


def test_load_scorer_rejects_other_files(tmp_path):
    from safetensors.numpy import save_file

    save_file({"weight": np.zeros(2)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(ValueError, match="w.safetensors"):
        load_scorer(tmp_path / "w.safetensors")


def test_retrain_command_writes_the_routes_scorer(tmp_path, capsys):
    log = tmp_path / "o.jsonl"
    x, _ = _synthetic_log(log)
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  - {name: digits, strategy: predictive, cheap: s, expensive: l,"
                      " predictive_model: scorers/digits.safetensors}\n")
    assert retrain_main(["--route", "digits", "--log", str(log), "--routes", str(routes)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 400 and summary["needs_expensive"] == int((x[:, 3] > 0.5).sum())
    assert load_scorer(tmp_path / "scorers/digits.safetensors").input_names == ("pixels",)
    assert retrain_main(["--route", "nope", "--log", str(log), "--routes", str(routes)]) == 2


def _script(weight: np.ndarray, path):
    lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(weight.astype(np.float32)))
    path.parent.mkdir(parents=True)
    torch.jit.script(lin).save(str(path))


def test_calibrate_command_writes_threshold(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    y = x.argmax(1)
    _script(np.eye(3) * 20, tmp_path / "repo/large/1/model.pt")  # always right, confident
    noisy = np.eye(3) + rng.normal(scale=0.3, size=(3, 3))  # sometimes wrong when unsure
    _script(noisy, tmp_path / "repo/small/1/model.pt")
    np.savez(tmp_path / "calib.npz", pixels=x, labels=y)
    routes = tmp_path / "routes.yaml"
    routes.write_text("routes:\n  - {name: digits, strategy: cascade, cheap: small, "
                      "expensive: large, threshold: 0.99}\n")
    base = ["--route", "digits", "--routes", str(routes), "--repo", str(tmp_path / "repo"),
            "--data", str(tmp_path / "calib.npz")]
    assert calibrate_main([*base, "--target-expensive-share", "0.3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["written"] and 0.25 < out["calibration_share"] <= 0.3
    assert out["calibration_accuracy"] > out["cheap_accuracy"]
    t = load_routes(routes)["digits"].threshold
    assert t == pytest.approx(out["threshold"], abs=1e-6)
    # the written threshold reproduces the share through the strategy's own rule
    cheap_logits = x @ noisy.T
    s = make_strategy("cascade", cheap="small", expensive="large", threshold=t)
    assert s.escalate(s.cheap_scores({}, cheap_logits)).mean() == pytest.approx(
        out["calibration_share"])
    # an accuracy target that needs more than the cap is reported, not written
    assert calibrate_main([*base, "--target-accuracy", "1.0", "--target-expensive-share",
                           "0.01"]) == 1
    assert not json.loads(capsys.readouterr().out)["written"]
    assert load_routes(routes)["digits"].threshold == t
    assert calibrate_main([*base, "--route", "nope", "--target-accuracy", "0.9"]) == 2
