"""Route strategies: one score, one threshold rule, decisions as data."""

import numpy as np
import pytest

from policies.routing import (
    CascadeStrategy,
    LinearScorer,
    PlanKind,
    RouteRequest,
    confidence,
    make_strategy,
    merge_rows,
    strategy_names,
)

X = {"pixels": np.zeros((1, 4), np.float32)}


def _logits(probs):
    return np.log(np.array(probs, dtype=np.float64))


def test_registry_lists_valid_names_on_unknown():
    assert set(strategy_names()) == {"static", "cascade", "predictive", "fast-then-refine"}
    with pytest.raises(ValueError, match="valid: static, cascade, predictive, fast-then-refine"):
        make_strategy("round-robin", cheap="a", expensive="b")


def test_static_always_one_model():
    s = make_strategy("static", cheap="small", expensive="large")
    plan = s.plan(RouteRequest(X))
    assert (plan.kind, plan.first, plan.then, plan.decision) == (PlanKind.SINGLE, "large", None,
                                                                 "expensive")
    static = make_strategy("static", cheap="small", use="cheap")
    assert static.plan(RouteRequest(X)).first == "small"
    with pytest.raises(ValueError, match="use='expensive'"):
        make_strategy("static", cheap="small", use="expensive")


def test_confidence_measures():
    lg = _logits([0.6, 0.3, 0.1])
    assert confidence(lg, "max_softmax")[0] == pytest.approx(0.6)
    assert confidence(lg, "margin")[0] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="max_softmax, margin"):
        confidence(lg, "entropy")


def test_cascade_accepts_confident_and_escalates_unsure():
    s = make_strategy("cascade", cheap="small", expensive="large", threshold=0.8)
    plan = s.plan(RouteRequest(X))
    assert plan.kind is PlanKind.CASCADE and plan.models == ("small", "large")
    ok = s.after_cheap(_logits([0.9, 0.05, 0.05]))
    assert not ok.escalate and ok.decision == "cheap" and ok.confidence == pytest.approx(0.9)
    unsure = s.after_cheap(_logits([0.5, 0.4, 0.1]))
    assert unsure.escalate and unsure.decision == "escalated" and unsure.threshold == 0.8


def test_cascade_margin_differs_from_max_softmax():
    lg = _logits([0.55, 0.44, 0.01])  # confident-looking max, but a near tie
    assert not make_strategy("cascade", cheap="a", expensive="b", threshold=0.5).after_cheap(
        lg).escalate
    assert make_strategy("cascade", cheap="a", expensive="b", threshold=0.5,
                         confidence="margin").after_cheap(lg).escalate


def test_cascade_rows_and_merge():
    s = CascadeStrategy(cheap="a", expensive="b", threshold=0.8)
    cheap = np.stack([_logits([0.9, 0.05, 0.05]), _logits([0.4, 0.3, 0.3])])
    v = s.after_cheap(cheap)
    assert v.rows == (False, True) and v.escalate
    assert v.confidence == pytest.approx(0.4)
    exp_only_row = np.array([[0.0, 9.0, 0.0]])
    merged = merge_rows(cheap, exp_only_row, v.rows)
    assert np.array_equal(merged[0], cheap[0]) and np.array_equal(merged[1], exp_only_row[0])
    full = np.zeros_like(cheap)
    assert np.array_equal(merge_rows(cheap, full, v.rows)[1], full[1])


def test_threshold_rule_is_strict_less_than():
    s = make_strategy("cascade", cheap="a", expensive="b", threshold=0.5)
    assert list(s.escalate(np.array([0.49, 0.5, 0.51]))) == [True, False, False]


def _scorer(w, b=0.0, uses_cheap=False):
    w = np.asarray(w, dtype=np.float64)
    return LinearScorer(w, b, np.zeros(w.size), np.ones(w.size), ("pixels",), uses_cheap)


def test_predictive_decides_before_running():
    # score = sigmoid(-x0): a large first pixel means "needs the expensive model"
    s = make_strategy("predictive", cheap="a", expensive="b", threshold=0.5,
                      scorer=_scorer([-1.0, 0, 0, 0]))
    easy = s.plan(RouteRequest({"pixels": np.array([[-3.0, 0, 0, 0]])}))
    hard = s.plan(RouteRequest({"pixels": np.array([[3.0, 0, 0, 0]])}))
    assert (easy.kind, easy.first, easy.decision) == (PlanKind.SINGLE, "a", "cheap")
    assert (hard.kind, hard.first, hard.decision) == (PlanKind.SINGLE, "b", "expensive")
    assert easy.score > 0.9 and hard.score < 0.1


def test_predictive_with_cheap_features_runs_cheap_first():
    # weights only on the cheap max_softmax feature
    s = make_strategy("predictive", cheap="a", expensive="b", threshold=0.5,
                      scorer=_scorer([0, 0, 0, 0, 20.0, 0, 0], b=-14.0, uses_cheap=True))
    req = RouteRequest(X)
    assert s.plan(req).kind is PlanKind.CASCADE
    assert not s.after_cheap(_logits([0.95, 0.05]), req).escalate
    assert s.after_cheap(_logits([0.55, 0.45]), req).escalate


def test_predictive_scorer_needs_its_inputs():
    s = make_strategy("predictive", cheap="a", expensive="b", scorer=_scorer([1.0]))
    with pytest.raises(ValueError, match="missing \\['pixels'\\]"):
        s.plan(RouteRequest({"other": np.zeros((1, 1))}))


def test_fast_then_refine_plans_both():
    plan = make_strategy("fast-then-refine", cheap="a", expensive="b").plan(RouteRequest(X))
    assert (plan.kind, plan.first, plan.then) == (PlanKind.REFINE, "a", "b")


def test_shadow_sampling_uses_the_callers_draw():
    s = make_strategy("cascade", cheap="a", expensive="b", shadow_rate=0.1)
    assert s.plan(RouteRequest(X, shadow_draw=0.05)).shadow
    assert not s.plan(RouteRequest(X, shadow_draw=0.5)).shadow
    assert not s.plan(RouteRequest(X)).shadow  # default draw never shadows


def test_bad_parameters_name_the_field():
    with pytest.raises(ValueError, match="threshold"):
        make_strategy("cascade", cheap="a", expensive="b", threshold=1.5)
    with pytest.raises(ValueError, match="shadow_rate"):
        make_strategy("cascade", cheap="a", expensive="b", shadow_rate=-0.1)
    with pytest.raises(ValueError, match="confidence"):
        make_strategy("cascade", cheap="a", expensive="b", confidence="entropy")
