"""vCache-style verified mode, pure policy: a labelled stream where similarity only partly
predicts correctness (the embedder is over-confident below ~0.93, as MiniLM is on near-misses).

The realised error rate counts *every* served hit against the ground truth (not only the sampled
verifications the policy sees) and must stay within ``max_error_rate``.
"""

from __future__ import annotations

import math
import random

import pytest

from policies.verified_cache import (
    EntryEvidence,
    VerifyConfig,
    decide,
    global_threshold,
    wilson_upper,
)


def _stream(n: int, seed: int):
    """(entry, similarity, correct): per-entry difficulty shifts where errors stop."""
    rng = random.Random(seed)
    shift = [rng.uniform(-0.03, 0.03) for _ in range(300)]
    for _ in range(n):
        e = rng.randrange(300)
        s = rng.uniform(0.7, 1.0)
        p_ok = 1 / (1 + math.exp(-60 * (s - 0.92 - shift[e])))
        yield e, s, rng.random() < p_ok


def _run(cfg: VerifyConfig, n: int = 30_000, seed: int = 7):
    rng = random.Random(seed + 1)
    outcomes: list[tuple[float, bool]] = []
    entries: dict[int, EntryEvidence] = {}
    threshold = global_threshold(outcomes, cfg)
    served = wrong = verified = verified_wrong = 0
    for e, s, ok in _stream(n, seed):
        if s < cfg.min_similarity:
            continue
        ev = entries.get(e, EntryEvidence())
        d = decide(s, ev, threshold, draw=rng.random(), config=cfg)
        if d.serve:
            served += 1
            wrong += not ok
        if d.verify:  # served and sampled, or computed anyway: the outcome is observed
            verified += d.serve
            verified_wrong += d.serve and not ok
            outcomes.append((s, ok))
            entries[e] = ev.add(s, ok)
            if (d.serve and not ok) or len(outcomes) % 25 == 0:  # the facade: every outcome
                threshold = global_threshold(outcomes[-5000:], cfg)
    return served, wrong, verified, verified_wrong, threshold


@pytest.mark.parametrize("delta", [0.05, 0.10])
def test_realised_error_rate_stays_within_max_error_rate(delta):
    cfg = VerifyConfig(max_error_rate=delta, sample_rate=0.2)
    served, wrong, verified, verified_wrong, threshold = _run(cfg)
    realised = wrong / served
    observed = verified_wrong / verified  # what /v2/status reports: a 20 % sample of `realised`
    print(f"\ndelta {delta}: served {served}, realised error {realised:.4f}, "
          f"observed (verified) {verified_wrong}/{verified}, final threshold {threshold:.3f}")
    assert realised <= delta
    assert abs(observed - realised) <= 3 * math.sqrt(delta * (1 - delta) / verified)
    assert served > 900  # it still serves; the stream is safe only above ~0.97


def test_a_budget_the_stream_cannot_meet_serves_nothing_wrong():
    served, wrong, *_ = _run(VerifyConfig(max_error_rate=0.02, sample_rate=0.2))
    assert wrong <= 0.02 * served


def test_a_looser_budget_serves_more():
    tight = _run(VerifyConfig(max_error_rate=0.02))[0]
    loose = _run(VerifyConfig(max_error_rate=0.10))[0]
    assert loose > tight


def test_an_entry_verified_wrong_is_not_served_below_that_similarity():
    cfg = VerifyConfig(max_error_rate=0.05)
    ev = EntryEvidence().add(0.95, False)
    assert not decide(0.94, ev, 0.85, draw=0.0, config=cfg).serve
    assert decide(0.94, ev, 0.85, draw=0.0, config=cfg).reason == "entry-wrong-before"
    assert decide(0.96, ev, 0.85, draw=0.99, config=cfg).serve


def test_the_threshold_needs_evidence_and_errors_push_it_up():
    cfg = VerifyConfig(max_error_rate=0.05)
    assert global_threshold([], cfg) == math.inf
    assert global_threshold([(0.95, True)] * 10, cfg) == math.inf  # 10 clean: not enough
    clean = [(0.80 + i * 0.0001, True) for i in range(200)]
    assert global_threshold(clean, cfg) == pytest.approx(0.80)
    errors_low = clean + [(0.80 + i * 0.0001, False) for i in range(0, 200, 10)]
    assert global_threshold(errors_low, cfg) > 0.805


def test_wilson_bound_and_config_validation():
    assert wilson_upper(0, 0, 1.645) == 1.0
    assert wilson_upper(0, 100, 1.645) < 0.03 < wilson_upper(1, 20, 1.645)
    with pytest.raises(ValueError, match="max_error_rate"):
        VerifyConfig(max_error_rate=0.0)
    with pytest.raises(ValueError, match="min_similarity"):
        VerifyConfig(max_error_rate=0.1, min_similarity=1.5)


def test_the_stream_is_hard_for_a_fixed_threshold():
    """Without verification a fixed threshold well above MiniLM's usual 0.85 still errs."""
    hits = [ok for _, s, ok in _stream(30_000, 7) if s >= 0.93]
    assert 1 - sum(hits) / len(hits) > 0.10
