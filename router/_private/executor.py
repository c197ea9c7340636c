"""The fallback chain's ``ModelExecutor`` over a ``Dispatcher`` (pool handles or local hosts)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fallbacks import Deadline, FallbackRequest, ModelReply, RetryBudget, retry_call
from pool.wire import PoolReply
from router.catalog import ModelCatalog
from router.dispatch import Dispatcher
from router.errors import TimeshareError
from router.validation import validate_inputs

__all__ = ["PoolExecutor", "ReplyLog"]


@dataclass(slots=True)
class ReplyLog:
    """Pool replies of one request, so the response can report the timings of the one used."""

    replies: list[PoolReply] = field(default_factory=list)

    def last(self) -> PoolReply | None:
        return self.replies[-1] if self.replies else None


class PoolExecutor:
    """Calls pools for the chain runner. A lost replica or transport error (idempotent: the
    model did not answer) is retried within the hop's budget, bounded by ``retry_budget``
    (retries at most ``ratio`` of requests); timeouts and model errors are not retried."""

    def __init__(self, catalog: ModelCatalog, dispatcher: Dispatcher, *,
                 retry_budget: RetryBudget | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._catalog = catalog
        self._dispatcher = dispatcher
        self._retry = retry_budget or RetryBudget(ratio=0.1, max_tokens=10)
        self._clock = clock

    async def call_model(self, request: FallbackRequest, *, model: str, version: str | None,
                         pool: str, budget_s: float) -> ModelReply:
        entry, version = await self._catalog.resolve(model, version)
        inputs = request.inputs
        if model != request.model:
            try:  # a fallback model's schema is config, not caller input: a mismatch is a failure
                inputs = validate_inputs(entry.config, dict(inputs))
            except TimeshareError as e:
                raise RuntimeError(f"fallback model {model!r} cannot take these inputs: {e}") from e
        if pool not in self._dispatcher.pools:
            pool = "cpu"
        deadline = Deadline(at=self._clock() + budget_s, clock=self._clock)

        async def attempt():
            return await self._dispatcher.dispatch(
                pool, model, version, dict(inputs), priority=request.priority,
                timeout_s=max(deadline.remaining(), 0.0))

        reply = await retry_call(attempt, deadline=deadline, budget=self._retry, max_attempts=2)
        log = request.extra.get("replies")
        if isinstance(log, ReplyLog):
            log.replies.append(reply)
        return ModelReply(outputs=reply.outputs, version=reply.version)
