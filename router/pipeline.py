"""The request pipeline: accept → (cache) → route → dispatch → degrade → record.

Ray-free: the catalog fetcher and the dispatcher are injected, so the same pipeline runs inside the
ingress deployment, in unit tests and in benchmarks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from pool.config import FallbackStep, ModelConfig
from pool.errors import DeviceOutOfMemory, ModelNotLoaded, RequestExpired
from router.catalog import ModelCatalog
from router.dispatch import Dispatcher, PoolReply
from router.errors import DeadlineExceeded, ServiceUnavailable, TimeshareError
from router.schemas import InferenceRequest, InferenceResponse, Timings
from router.validation import validate_inputs

__all__ = ["PipelineConfig", "Pipeline", "Recorder", "choose_pool"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    default_deadline_ms: float = 1000.0
    fallback_margin_ms: float = 10.0  # kept back from the primary call for the fallback chain


class Recorder(Protocol):
    def record(self, request: InferenceRequest, response: InferenceResponse | None,
               error: BaseException | None) -> None: ...


def choose_pool(config: ModelConfig, pools: tuple[str, ...]) -> str:
    """Where a model runs: its configured device if that pool exists, else the CPU pool."""
    if config.device in ("gpu", "any") and "gpu" in pools:
        return "gpu"
    return "cpu"


class Pipeline:
    def __init__(
        self,
        catalog: ModelCatalog,
        dispatcher: Dispatcher,
        *,
        config: PipelineConfig = PipelineConfig(),
        recorders: tuple[Recorder, ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.config = config
        self._recorders = recorders
        self._clock = clock

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        start = self._clock()
        try:
            response = await self._infer(request, start)
        except BaseException as e:
            self._record(request, None, e)
            raise
        self._record(request, response, None)
        return response

    async def _infer(self, req: InferenceRequest, start: float) -> InferenceResponse:
        entry, version = await self.catalog.resolve(req.model, req.version)
        config = entry.config
        assert config is not None
        inputs = validate_inputs(config, req.inputs)
        deadline_ms = req.deadline_ms or config.deadline_ms or self.config.default_deadline_ms
        deadline = start + deadline_ms / 1000.0
        pool = choose_pool(config, self.dispatcher.pools)
        margin = self.config.fallback_margin_ms / 1000.0 if config.fallback else 0.0
        budget = deadline - self._clock() - margin
        try:
            reply = await self._call(pool, req.model, version, inputs, req, budget)
        except TimeshareError:
            raise
        except Exception as e:
            reason = _reason(e)
            log.info("%s@%s on %s failed (%s); degrading", req.model, version, pool, reason)
            return await self._degrade(req, config, inputs, pool, reason, deadline, start)
        return self._response(req, reply, start)

    async def _call(self, pool: str, model: str, version: str, inputs: dict[str, np.ndarray],
                    req: InferenceRequest, budget_s: float) -> PoolReply:
        if budget_s <= 0:
            raise asyncio.TimeoutError("no time left")
        return await asyncio.wait_for(
            self.dispatcher.dispatch(pool, model, version, inputs, priority=req.priority,
                                     timeout_s=budget_s),
            timeout=budget_s,
        )

    async def _degrade(self, req: InferenceRequest, config: ModelConfig,
                       inputs: dict[str, np.ndarray], failed_pool: str, reason: str,
                       deadline: float, start: float) -> InferenceResponse:
        for step in config.fallback:
            remaining = deadline - self._clock()
            try:
                reply = await self._fallback_step(step, req, config, inputs, failed_pool, remaining)
            except Exception as e:
                log.info("fallback %s failed: %s", step.kind, _reason(e))
                continue
            if reply is None:
                continue
            resp = self._response(req, reply, start) if isinstance(reply, PoolReply) else reply
            return resp.model_copy(update={"degraded": True, "reason": reason,
                                           "timings": self._timings(start, resp.timings)})
        if reason == "timeout":
            raise DeadlineExceeded(
                f"deadline_ms: {req.model} did not answer within the deadline and its fallback "
                f"chain gave no answer", field="deadline_ms")
        raise ServiceUnavailable(f"model: {req.model} failed ({reason}) and its fallback chain "
                                 f"gave no answer", field="model")

    async def _fallback_step(self, step: FallbackStep, req, config, inputs, failed_pool,
                             remaining: float):
        if step.kind == "default":
            outputs = {k: np.asarray(v, dtype=config.outputs[0].numpy_dtype)
                       for k, v in (step.outputs or {}).items()}
            n = next(iter(inputs.values())).shape[0]
            outputs = {k: np.repeat(v[:1], n, axis=0) if v.ndim and v.shape[0] == 1 else v
                       for k, v in outputs.items()}
            return InferenceResponse(request_id=req.request_id, model=req.model, outputs=outputs,
                                     served_by="default")
        if step.kind == "model":
            entry, version = await self.catalog.resolve(step.model, step.version)
            pool = choose_pool(entry.config, self.dispatcher.pools)
            return await self._call(pool, step.model, version, inputs, req, remaining)
        if step.kind == "cpu" and failed_pool != "cpu" and "cpu" in self.dispatcher.pools:
            _, version = await self.catalog.resolve(req.model, req.version)
            return await self._call("cpu", req.model, version, inputs, req, remaining)
        return None

    def _response(self, req: InferenceRequest, reply: PoolReply, start: float) -> InferenceResponse:
        return InferenceResponse(
            request_id=req.request_id,
            model=reply.model,
            version=reply.version,
            outputs=reply.outputs,
            served_by=f"{reply.pool}:{reply.model}@{reply.version}",
            timings=Timings(queue_ms=reply.queue_ms, compute_ms=reply.compute_ms,
                            swap_ms=reply.swap_ms,
                            total_ms=(self._clock() - start) * 1e3),
        )

    def _timings(self, start: float, t: Timings) -> Timings:
        return t.model_copy(update={"total_ms": (self._clock() - start) * 1e3})

    def _record(self, req, resp, err) -> None:
        for r in self._recorders:
            try:
                r.record(req, resp, err)
            except Exception:  # recording never fails a request
                log.exception("recorder %r failed", r)


_REASONS = ((RequestExpired, "expired"), (DeviceOutOfMemory, "device_oom"),
            (ModelNotLoaded, "not_loaded"))


def _reason(e: BaseException) -> str:
    """A short label for why the primary call failed (goes into ``reason``)."""
    if isinstance(e, (asyncio.TimeoutError, TimeoutError)):
        return "timeout"
    for cls, label in _REASONS:
        if isinstance(e, cls):  # Ray's wrapper subclasses the cause, so this sees through it
            return label
    return f"error: {type(e).__name__}"
