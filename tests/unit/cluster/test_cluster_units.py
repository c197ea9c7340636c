"""Pure pieces of #19: per-replica quota shares, the quota-store alert rule, autoscaling options."""

from __future__ import annotations

import pytest

from alerting.metrics import MetricsSnapshot
from alerting.rules import RuleEvaluator
from alerting.rules_config import RulesConfig
from fallbacks import CallerLimits, CallerQuotas, QuotaConfig, QuotaExceeded
from router.scaling import AutoscalingSettings, replica_options, sharing_replicas
from tests.support.clocks import FakeClock


def test_a_replica_share_scales_rate_burst_and_concurrency() -> None:
    cfg = QuotaConfig(default=CallerLimits(max_concurrency=3, rate_per_s=10, burst=4))
    clock = FakeClock(0.0)
    q = CallerQuotas(cfg, clock=clock, share=0.5)
    assert q.limits_for("a") == CallerLimits(max_concurrency=2, rate_per_s=5, burst=2)
    leases = [q.acquire("a"), q.acquire("a")]  # the burst of 2 and 2 in flight
    with pytest.raises(QuotaExceeded, match="concurrency"):
        q.acquire("a")
    for lease in leases:
        lease.release()
    with pytest.raises(QuotaExceeded, match="rate limit"):
        q.acquire("a")  # the bucket is empty; 5/s refills one token in 0.2 s
    clock.set(0.2)
    q.acquire("a").release()


def test_local_fallback_leases_say_so_and_the_refusal_names_the_store() -> None:
    q = CallerQuotas(QuotaConfig(default=CallerLimits(rate_per_s=1, burst=1)),
                     clock=FakeClock(0.0))
    assert q.acquire("a", local_fallback=True).local_fallback
    with pytest.raises(QuotaExceeded, match="quota store is unavailable"):
        q.acquire("a", local_fallback=True)
    assert not q.acquire("b", check_rate=False).local_fallback


def test_share_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="share=0"):
        CallerQuotas(QuotaConfig(), share=0)


def test_quota_store_down_alerts_while_the_store_is_down() -> None:
    rules = RulesConfig.model_validate({"quota_store_down": {"for": "0s"}})
    ev = RuleEvaluator(rules, "prod")
    fired = ev.evaluate(MetricsSnapshot(100.0, quota_stores_down=frozenset({"redis"})))
    assert [(a.name, dict(a.labels).get("store")) for a in fired] == [
        ("TimeshareQuotaStoreDown", "redis")]
    after = ev.evaluate(MetricsSnapshot(101.0))
    assert [a.status(101.0).value for a in after if a.name == "TimeshareQuotaStoreDown"] == [
        "resolved"]


def test_replica_options_fixed_or_autoscaled() -> None:
    assert replica_options(3, None) == {"num_replicas": 3}
    auto = AutoscalingSettings(min_replicas=2, max_replicas=6, target_ongoing_requests=32)
    opts = replica_options(3, auto)
    assert opts["num_replicas"] == "auto"
    assert opts["autoscaling_config"]["max_replicas"] == 6
    assert sharing_replicas(3, None) == 3 and sharing_replicas(3, auto) == 2
    with pytest.raises(ValueError, match="min_replicas=4 exceeds max_replicas=2"):
        AutoscalingSettings(min_replicas=4, max_replicas=2, target_ongoing_requests=1)


def test_prod_overlay_autoscales_the_ingress() -> None:
    from router.app import build_app

    app = build_app({"repository": "var/x", "environment": "prod"})
    cfg = app._bound_deployment._deployment_config.autoscaling_config
    assert (cfg.min_replicas, cfg.max_replicas, cfg.target_ongoing_requests) == (2, 8, 64)
