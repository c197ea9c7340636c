"""The fallback chain's ``ModelExecutor`` over a ``Dispatcher`` (pool handles or local hosts)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fallbacks import FallbackRequest, ModelReply
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
    def __init__(self, catalog: ModelCatalog, dispatcher: Dispatcher) -> None:
        self._catalog = catalog
        self._dispatcher = dispatcher

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
        reply = await self._dispatcher.dispatch(pool, model, version, dict(inputs),
                                                priority=request.priority, timeout_s=budget_s)
        log = request.extra.get("replies")
        if isinstance(log, ReplyLog):
            log.replies.append(reply)
        return ModelReply(outputs=reply.outputs, version=reply.version)
