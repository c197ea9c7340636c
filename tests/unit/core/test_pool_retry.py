"""The pool executor retries a lost call once (idempotent failures only), through the real
pipeline over a real host; its first attempt runs inline, the retry machinery after it fails."""

from __future__ import annotations

import numpy as np

from pool.host import ModelHost
from pool.work import PoolReply, PoolWork
from router.catalog import ModelCatalog
from router.pipeline import Pipeline
from router.pool_client import LocalPoolClient
from router.schemas import CacheControl, InferenceRequest


class FlakyClient(LocalPoolClient):
    """A pool whose first ``failures`` calls fail with ``error`` before reaching the host."""

    def __init__(self, host: ModelHost, error: BaseException, failures: int) -> None:
        super().__init__(host)
        self.error, self.failures, self.calls = error, failures, 0

    async def run(self, work: PoolWork) -> PoolReply:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return await super().run(work)


def _pipeline(client: LocalPoolClient) -> Pipeline:
    async def fetch():
        return client.host.index()

    return Pipeline(ModelCatalog(fetch), {"cpu": client})


def _request() -> InferenceRequest:
    x = np.full((1, 64), 3.0, dtype=np.float32)
    return InferenceRequest(model="digits-small", inputs={"pixels": x},
                            cache=CacheControl(skip_read=True, skip_write=True))


async def test_a_lost_connection_is_retried_once_and_answered_by_the_model(host):
    client = FlakyClient(host, ConnectionError("replica gone"), failures=1)
    resp = await _pipeline(client).infer(_request())
    assert client.calls == 2 and not resp.degraded
    assert resp.served_by.endswith("digits-small@1")


async def test_a_second_loss_and_a_model_error_are_not_retried_further(host):
    twice = FlakyClient(host, ConnectionError("replica gone"), failures=2)
    resp = await _pipeline(twice).infer(_request())
    assert twice.calls == 2 and resp.degraded  # at most two calls, then the fallback chain
    broken = FlakyClient(host, RuntimeError("model raised"), failures=1)
    resp = await _pipeline(broken).infer(_request())
    assert broken.calls == 1 and resp.degraded  # not idempotent-transient: no retry
