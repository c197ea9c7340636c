import pytest
from pydantic import ValidationError

from fallbacks.quotas import CallerLimits, CallerQuotas, QuotaConfig
from router.errors import QuotaExceeded


def test_concurrency_limit_and_release(clock):
    q = CallerQuotas(QuotaConfig(default=CallerLimits(max_concurrency=2)), clock=clock)
    a, b = q.acquire("alice"), q.acquire("alice")
    with pytest.raises(QuotaExceeded) as ei:
        q.acquire("alice")
    assert ei.value.status_code == 429 and ei.value.field == "caller"
    assert "concurrency" in str(ei.value)
    q.acquire("bob").release()  # other callers are unaffected
    a.release()
    a.release()  # idempotent
    assert q.in_flight("alice") == 1
    with q.acquire("alice"):
        assert q.in_flight("alice") == 2
    assert q.in_flight("alice") == 1
    b.release()


def test_context_manager_releases_on_error(clock):
    q = CallerQuotas(QuotaConfig(default=CallerLimits(max_concurrency=1)), clock=clock)
    with pytest.raises(RuntimeError), q.acquire("c"):
        raise RuntimeError("model failed")
    assert q.in_flight("c") == 0


def test_rate_limit_token_bucket(clock):
    q = CallerQuotas(QuotaConfig(default=CallerLimits(rate_per_s=2, burst=3)), clock=clock)
    for _ in range(3):
        q.acquire("c").release()
    with pytest.raises(QuotaExceeded, match="rate limit"):
        q.acquire("c")
    clock.advance(0.5)  # one token back
    q.acquire("c").release()
    with pytest.raises(QuotaExceeded):
        q.acquire("c")
    clock.advance(100)  # refills up to the burst only
    for _ in range(3):
        q.acquire("c").release()
    with pytest.raises(QuotaExceeded):
        q.acquire("c")


def test_rejected_call_holds_no_slot(clock):
    q = CallerQuotas(
        QuotaConfig(default=CallerLimits(max_concurrency=5, rate_per_s=1)), clock=clock
    )
    q.acquire("c")
    with pytest.raises(QuotaExceeded):
        q.acquire("c")
    assert q.in_flight("c") == 1


def test_per_caller_overrides_merge_with_defaults(clock):
    cfg = QuotaConfig.model_validate(
        {
            "default": {"max_concurrency": 1, "rate_per_s": 1},
            "callers": {"batch-job": {"max_concurrency": 3}, "admin": {"rate_per_s": None}},
        }
    )
    assert cfg.limits_for("batch-job") == CallerLimits(max_concurrency=3, rate_per_s=1)
    assert cfg.limits_for("admin") == CallerLimits(max_concurrency=1)
    assert cfg.limits_for("someone") == cfg.default
    q = CallerQuotas(cfg, clock=clock)
    for _ in range(5):
        q.acquire("admin").release()  # no rate limit for admin


def test_config_errors_name_the_field():
    with pytest.raises(ValidationError, match="max_concurrency"):
        CallerLimits(max_concurrency=0)
    with pytest.raises(ValidationError, match="burst=2 needs rate_per_s"):
        CallerLimits(burst=2)


def test_tracked_callers_are_bounded(clock):
    q = CallerQuotas(
        QuotaConfig(default=CallerLimits(max_concurrency=1), max_tracked_callers=2), clock=clock
    )
    busy = q.acquire("busy")
    for name in ("a", "b", "c"):
        q.acquire(name).release()
    assert len(q._states) == 2 and q.in_flight("busy") == 1
    busy.release()
    assert q.in_flight("busy") == 0
