"""Threshold calibration: share targets, accuracy targets, the trade-off curve, APGR."""

import numpy as np
import pytest

from policies.calibration import (
    apgr,
    escalation_mask,
    gap_share_to_reach,
    share_to_reach,
    threshold_for_accuracy,
    threshold_for_share,
    tradeoff_curve,
)


def test_share_target_escalates_at_most_the_share():
    rng = np.random.default_rng(0)
    scores = rng.uniform(size=1000)
    for target in (0.0, 0.1, 0.3, 0.77, 1.0):
        cal = threshold_for_share(scores, target)
        share = escalation_mask(scores, cal.threshold).mean()
        assert share == pytest.approx(cal.share)
        assert share <= target + 1e-12
        assert share >= target - 1 / 1000  # and not needlessly less


def test_share_threshold_sits_between_distinct_scores():
    cal = threshold_for_share([0.2, 0.5, 0.9, 0.99], 0.5)
    assert cal.threshold == pytest.approx(0.7)
    assert cal.share == 0.5


def test_ties_never_split():
    scores = [0.5, 0.5, 0.5, 0.9]
    cal = threshold_for_share(scores, 0.5)  # cannot escalate exactly half of the tied block
    assert cal.share == 0.0
    assert threshold_for_share(scores, 0.75).share == 0.75


def test_share_one_escalates_everything_even_at_score_one():
    scores = np.array([1.0, 1.0, 0.3])
    cal = threshold_for_share(scores, 1.0)
    assert escalation_mask(scores, cal.threshold).all()


def test_accuracy_target_picks_smallest_share():
    # low scores are exactly where cheap is wrong and expensive right
    scores = np.array([0.1, 0.2, 0.3, 0.8, 0.9, 0.95])
    cheap = np.array([0, 0, 1, 1, 1, 1], bool)
    exp = np.array([1, 1, 1, 1, 1, 0], bool)
    cal = threshold_for_accuracy(scores, cheap, exp, 1.0)
    assert cal.met and cal.share == pytest.approx(2 / 6) and cal.accuracy == 1.0


def test_accuracy_target_unreachable_within_cap_reports_not_met():
    scores = np.array([0.1, 0.2, 0.3, 0.8])
    cheap = np.array([0, 0, 0, 1], bool)
    exp = np.array([1, 1, 1, 1], bool)
    cal = threshold_for_accuracy(scores, cheap, exp, 1.0, max_share=0.5)
    assert not cal.met
    assert cal.share == 0.5 and cal.accuracy == 0.75


def test_curve_is_monotone_in_share_and_ends_at_both_models():
    rng = np.random.default_rng(1)
    scores = rng.uniform(size=200)
    cheap = rng.uniform(size=200) < scores  # cheap more often right when confident
    exp = rng.uniform(size=200) < 0.95
    curve = tradeoff_curve(scores, cheap, exp)
    shares = [p.share for p in curve]
    assert shares == sorted(shares) and shares[0] == 0.0 and shares[-1] == 1.0
    assert curve[0].accuracy == pytest.approx(cheap.mean())
    assert curve[-1].accuracy == pytest.approx(exp.mean())


def test_apgr_perfect_and_random_router():
    # a perfect oracle recovers the whole gap with the first escalations
    n = 100
    cheap = np.ones(n, bool)
    cheap[:10] = False
    exp = np.ones(n, bool)
    perfect = np.where(cheap, 0.9, 0.1)
    curve = tradeoff_curve(perfect, cheap, exp)
    assert apgr(curve, 0.9, 1.0) == pytest.approx(1 - 0.1 / 2)
    assert share_to_reach(curve, 1.0) == pytest.approx(0.1)
    assert gap_share_to_reach(curve, 0.9, 1.0, 0.5) == pytest.approx(0.1)
    # the worst ordering escalates the wrong rows first
    worst = np.where(cheap, 0.1, 0.9)
    assert apgr(tradeoff_curve(worst, cheap, exp), 0.9, 1.0) == pytest.approx(0.1 / 2)


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match="target_share"):
        threshold_for_share([0.5], 1.5)
    with pytest.raises(ValueError, match="scores"):
        threshold_for_share([], 0.5)
    with pytest.raises(ValueError, match="scores"):
        threshold_for_share([float("nan")], 0.5)
    with pytest.raises(ValueError, match="lengths"):
        tradeoff_curve([0.1, 0.2], [True], [True, False])
    with pytest.raises(ValueError, match="exceed"):
        apgr(tradeoff_curve([0.1], [True], [True]), 1.0, 1.0)
