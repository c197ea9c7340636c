"""The ingress feeds the channel_failing rule from the alerter's delivery stats."""

from __future__ import annotations

import pytest

from alerting import MetricsSnapshot, RuleEvaluator, RulesConfig

pytestmark = pytest.mark.asyncio(loop_scope="package")


class _Method:
    def __init__(self, result) -> None:
        self._result = result

    def remote(self):
        async def call():
            if isinstance(self._result, Exception):
                raise self._result
            return self._result

        return call()


class FakeAlerterHandle:
    """Stands in for the alerter deployment's handle: only what the ingress calls."""

    def __init__(self, failing) -> None:
        self.failing_channels = _Method(failing)


async def test_failing_channels_reach_the_rule(ingress):
    ingress._alerter = FakeAlerterHandle(["hook/webhook"])
    try:
        failing = await ingress._failing_channels()
        ingress._alerter = FakeAlerterHandle(RuntimeError("alerter restarting"))
        assert await ingress._failing_channels() == frozenset()  # no news is not a failure
    finally:
        ingress._alerter = None
    assert failing == {"hook/webhook"}
    rules = RulesConfig.model_validate({"channel_failing": {"for": "0s"}})
    evaluator = RuleEvaluator(rules, "prod")
    alerts = evaluator.evaluate(MetricsSnapshot(at=0.0, failing_channels=failing))
    alerts += evaluator.evaluate(MetricsSnapshot(at=1.0, failing_channels=failing))
    assert any(a.labels.get("channel") == "hook/webhook" for a in alerts), alerts
