"""The text router on outcome logs with known structure, with the real MiniLM embedder.

The log (``deploy.demo_text_outcomes``): account questions the small model answers ~90 % of the
time, and multi-step requests (code, proofs, word problems) it answers ~35 % of the time while
the large model answers ~88 %. Only the second topic needs the expensive model, and only the
topic is learnable (each line's outcome is drawn at random), so a router that learned the topic
needs about half the random router's expensive share to recover half the quality gap.
"""

from __future__ import annotations

import json

import pytest

from deploy.demo_text_outcomes import generate
from deploy.routes_cli import calibrate_main, retrain_main
from deploy.text_routes_cli import evaluate_main
from router.cache import SharedEmbedder
from router.route_training import load_scorer
from router.routes import load_routes
from router.text_routing import (
    TEXT_FEATURE,
    evaluate,
    read_text_outcomes,
    split_rows,
    text_outcome_line,
    train_text_scorer,
)

CPT50_MARGIN = 0.10  # trained CPT(50%) must be at least this much below random's
ROUTES = """
routes:
  - name: assistant-text
    strategy: predictive
    cheap: small
    expensive: large
    predictive_model: assistant.safetensors
"""


@pytest.fixture(scope="module")
def embed(minilm):
    return SharedEmbedder(minilm).embed  # texts repeat across tests: embedded once


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("outcomes") / "outcomes.jsonl"
    path.write_text("\n".join(generate(400, seed=3)) + "\n")
    return path


@pytest.fixture
def routes_file(tmp_path):
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    return path


def test_trained_router_beats_random_on_cpt50_and_apgr(log_file, embed):
    data = read_text_outcomes(log_file, route="assistant-text")
    train, held = split_rows(len(data))
    assert set(train).isdisjoint(held) and len(held) == round(0.3 * len(data))
    scorer = train_text_scorer(data.take(train), embed)
    assert scorer.input_names == (TEXT_FEATURE,)
    report = evaluate(scorer, data.take(held), embed)
    trained, rand = report["trained"], report["random"]
    print(f"\nheld-out {report['rows']}: trained CPT50 {trained['cpt50']:.3f} CPT80 "
          f"{trained['cpt80']:.3f} APGR {trained['apgr']:.3f}; random CPT50 {rand['cpt50']:.3f} "
          f"CPT80 {rand['cpt80']:.3f} APGR {rand['apgr']:.3f}")
    assert trained["cpt50"] + CPT50_MARGIN <= rand["cpt50"]
    assert trained["apgr"] >= rand["apgr"] + 0.1
    curve = trained["curve"]
    assert curve[0]["expensive_share"] == 0.0 and curve[-1]["expensive_share"] == 1.0
    assert curve[0]["quality"] == pytest.approx(report["cheap_quality"])
    assert curve[-1]["quality"] == pytest.approx(report["expensive_quality"])


def test_cli_retrain_evaluate_calibrate(log_file, routes_file, embed, tmp_path, capsys,
                                        monkeypatch):
    import deploy.text_routes_cli as cli

    monkeypatch.setattr(cli, "_embedder", lambda: embed)  # the session model, not a reload
    assert retrain_main(["--route", "assistant-text", "--routes", str(routes_file),
                         "--outcomes", str(log_file)]) == 0
    scorer = load_scorer(tmp_path / "assistant.safetensors")  # next to the routes file
    assert scorer.input_names == (TEXT_FEATURE,)
    out = tmp_path / "eval.json"
    png = tmp_path / "curve.png"
    assert evaluate_main(["--route", "assistant-text", "--routes", str(routes_file),
                          "--outcomes", str(log_file), "--json", str(out), "--plot", str(png)],
                         embed=embed) == 0
    report = json.loads(out.read_text())
    assert report["trained"]["cpt50"] < report["random"]["cpt50"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    assert calibrate_main(["--route", "assistant-text", "--routes", str(routes_file),
                           "--outcomes", str(log_file), "--target-expensive-share", "0.4"]) == 0
    cal = json.loads(capsys.readouterr().out)
    assert cal["held_out_share"] <= 0.4 and cal["written"]
    assert load_routes(routes_file)["assistant-text"].threshold == pytest.approx(
        cal["threshold"], abs=1e-6)
    assert calibrate_main(["--route", "assistant-text", "--routes", str(routes_file),
                           "--outcomes", str(log_file), "--target-quality-fraction", "0.9",
                           "--dry-run"]) == 0
    q = json.loads(capsys.readouterr().out)
    assert q["held_out_quality"] >= 0.9 * report["expensive_quality"] - 0.05


def test_errors_name_the_route_the_line_and_the_class(log_file, routes_file, tmp_path, capsys,
                                                      embed):
    args = ["--routes", str(routes_file), "--outcomes", str(log_file)]
    assert evaluate_main(["--route", "nope", *args], embed=embed) == 2
    assert "'nope' not in" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    good = text_outcome_line("assistant-text", "hi", True, True)
    bad.write_text(f"{good}\n{good}\n{{\"route\": \"assistant-text\", \"text\": 3}}\n")
    assert evaluate_main(["--route", "assistant-text", "--routes", str(routes_file),
                          "--outcomes", str(bad)], embed=embed) == 2
    assert f"{bad}:3: field 'text' must be a str" in capsys.readouterr().err
    bad.write_text(f"{good}\nnot json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        read_text_outcomes(bad, route="assistant-text")
    bad.write_text(f"{good}\n{good}\n")
    with pytest.raises(ValueError, match="one class only"):
        read_text_outcomes(bad, route="assistant-text")
    with pytest.raises(ValueError, match=r"no lines for route 'x'.*'assistant-text'"):
        read_text_outcomes(bad, route="x")


def test_text_with_cheap_confidence_and_tensor_inputs(log_file, embed, tmp_path):
    """Lines may carry tensor ``inputs`` and ``cheap_logits``; a scorer may read all three."""
    import random

    import numpy as np

    from policies.routing import RouteRequest, make_strategy

    rng = random.Random(5)
    lines = []
    for line in log_file.read_text().splitlines():
        rec = json.loads(line)
        if rec["route"] != "assistant-text":
            continue
        peak = 4.0 if rec["cheap_ok"] else rng.uniform(0.0, 4.0)  # confident when right
        logits = [peak] + [rng.uniform(-1, 1) for _ in range(4)]
        lines.append(text_outcome_line(rec["route"], rec["text"], rec["cheap_ok"],
                                       rec["expensive_ok"], inputs={"len": [len(rec["text"])]},
                                       cheap_logits=logits))
    path = tmp_path / "rich.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = read_text_outcomes(path, route="assistant-text")
    assert data.cheap_logits is not None and data.cheap_logits.shape == (len(data), 5)
    train, held = split_rows(len(data))
    scorer = train_text_scorer(data.take(train), embed, use_inputs=True, uses_cheap=True)
    assert scorer.input_names == (TEXT_FEATURE, "len") and scorer.uses_cheap
    assert scorer.weight.size == 384 + 1 + 3
    report = evaluate(scorer, data.take(held), embed)
    assert report["trained"]["cpt50"] + CPT50_MARGIN <= report["random"]["cpt50"]
    # At serving time such a route decides after the cheap model ran (a cascade).
    strategy = make_strategy("predictive", cheap="s", expensive="l", scorer=scorer)
    vec = np.asarray(embed(["How do I reset my password?"]), dtype=np.float64)
    req = RouteRequest(inputs={TEXT_FEATURE: vec, "len": np.array([[27.0]])})
    assert strategy.plan(req).decision == "cascade"
    assert strategy.after_cheap(np.array([[4.0, 0, 0, 0, 0]]), req).decision == "cheap"
    with pytest.raises(ValueError, match="needs 'cheap_logits'"):
        train_text_scorer(read_text_outcomes(log_file, route="assistant-text"), embed,
                          uses_cheap=True)
