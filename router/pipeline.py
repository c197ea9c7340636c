"""The request pipeline: accept → cache → admit → dispatch → degrade → record, and routes.

Ray-free: the catalog fetcher, the dispatcher, the pools' load view and the cache are injected,
so the same pipeline runs in the ingress deployment, in unit tests and in benchmarks.

Order note: the cache is consulted before admission control, so a shed request still gets an
exact cache hit (cheaper and better than its fallback); only the compute is shed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from fallbacks import (
    BreakerRegistry,
    CallerQuotas,
    ChainConfig,
    ChainRunner,
    CompiledStep,
    Deadline,
    FallbackRequest,
    Target,
    compile_chain,
)
from policies.admission import AdmissionConfig, AdmissionSnapshot, decide_admission
from policies.priority import Priority
from policies.routing import PlanKind, RouteRequest, RouteStrategy, merge_rows
from policies.spill import SpillState, decide_spill
from pool.config import ModelConfig
from router.cache import CachedAnswer, CacheOutcome, ResultCache
from router.catalog import ModelCatalog
from router.dispatch import Dispatcher
from router._private.executor import PoolExecutor, ReplyLog
from router.routes import RouteConfig
from router.schemas import InferenceRequest, InferenceResponse, RouteInfo, Timings
from router.validation import validate_inputs

__all__ = ["PipelineConfig", "Pipeline", "Recorder", "choose_pool"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    default_deadline_ms: float = 1000.0
    chain: ChainConfig = field(default_factory=ChainConfig)
    admission: AdmissionConfig | None = field(default_factory=AdmissionConfig)
    pool_capacity: int = 64  # requests a pool holds in flight before classes start being shed


class Recorder:
    """Sees every request once it has its final answer or error (metrics, call log, alerts)."""

    def record(self, request: InferenceRequest, response: InferenceResponse | None,
               error: BaseException | None, elapsed_s: float) -> None:  # pragma: no cover
        raise NotImplementedError


def choose_pool(config: ModelConfig, pools: Sequence[str]) -> str:
    """Where a model runs: the GPU pool unless it is CPU-only or there is none."""
    return "gpu" if config.device in ("gpu", "any") and "gpu" in pools else "cpu"


@dataclass(frozen=True, slots=True)
class _Answer(CachedAnswer):
    """A computed answer: what the cache stores plus labels that must reach every sharer."""

    degraded: bool = False
    reason: str | None = None
    timings: Timings | None = None


class Pipeline:
    def __init__(
        self,
        catalog: ModelCatalog,
        dispatcher: Dispatcher,
        *,
        config: PipelineConfig = PipelineConfig(),
        routes: Mapping[str, RouteConfig] | None = None,
        strategies: Mapping[str, RouteStrategy] | None = None,
        cache: ResultCache | None = None,
        breakers: BreakerRegistry | None = None,
        quotas: CallerQuotas | None = None,
        load: Callable[[str], Sequence] = lambda pool: (),
        recorders: Sequence[Recorder] = (),
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.config = config
        self.routes = dict(routes or {})
        self.strategies = dict(strategies or {})
        self.cache = cache
        self.quotas = quotas
        self.load = load
        self._recorders = tuple(recorders)
        self._clock = clock
        self._rng = rng
        # Per-(model, pool) circuit breakers guard failing models. The chain runner's per-pool
        # adaptive throttle is not used: with one CPU pool it would let one broken model
        # throttle every model on it.
        self.runner = ChainRunner(PoolExecutor(catalog, dispatcher, clock=clock),
                                  config=config.chain, breakers=breakers, clock=clock)
        self._chains: dict[str, tuple[ModelConfig, tuple[CompiledStep, ...]]] = {}
        self._in_flight: dict[tuple[str, Priority], int] = {}
        self._compute_s: dict[str, float] = {}  # EWMA of per-request compute, for spill
        self._spill: dict[tuple[str, Priority], SpillState] = {}
        self._background: set[asyncio.Task] = set()

    # -- entry points ---------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """The final answer (for fast-then-refine routes: the refined one)."""
        if request.model not in self.routes:  # the common case, without the generator's cost
            start = self._clock()
            try:  # a quota rejection (429) is recorded like any other outcome
                quota = (self.quotas.acquire(request.caller) if self.quotas
                         else contextlib.nullcontext())
                with quota:
                    resp = await self._answer(request, request.model, request.version, start)
            except Exception as e:
                self._record(request, None, e, start)
                raise
            self._record(request, resp, None, start)
            return resp
        last = None
        async for last in self.stream(request):
            pass
        assert last is not None
        return last

    async def stream(self, req: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Answers in order; one unless the target is a fast-then-refine route."""
        start = self._clock()
        try:  # a quota rejection (429) is recorded like any other outcome
            quota = self.quotas.acquire(req.caller) if self.quotas else contextlib.nullcontext()
            with quota:
                if req.model in self.routes:
                    async for resp in self._route(req, start):
                        if resp.final:
                            self._record(req, resp, None, start)
                        yield resp
                else:
                    resp = await self._answer(req, req.model, req.version, start)
                    self._record(req, resp, None, start)
                    yield resp
        except Exception as e:
            self._record(req, None, e, start)
            raise

    # -- one model: cache, admission, chain -------------------------------------------------
    async def _answer(self, req: InferenceRequest, model: str, version: str | None, start: float,
                      *, pool: str | None = None, deadline: Deadline | None = None,
                      ) -> InferenceResponse:
        entry, version = await self.catalog.resolve(model, version)
        cfg = entry.config
        inputs = validate_inputs(cfg, req.inputs)
        deadline = deadline or Deadline.for_request(
            request_ms=req.deadline_ms, model_ms=cfg.deadline_ms,
            app_default_ms=self.config.default_deadline_ms, clock=self._clock,
            arrival_s=req.arrival_s)
        pool = pool or choose_pool(cfg, self.dispatcher.pools)
        rows = next(iter(inputs.values())).shape[0]

        async def compute() -> tuple[_Answer, bool]:
            answer = await self._run_chain(req, cfg, model, version, inputs, pool, deadline, rows)
            return answer, not answer.degraded

        if self.cache is None:
            answer, outcome = (await compute())[0], CacheOutcome("off")
        else:
            # Keyed on the inputs as sent (dtype included: [1, 2] as int and as float differ),
            # computed on the validated, cast ones.
            answer, outcome = await self.cache.get_or_compute(
                model=model, version=version, inputs=req.inputs, text=req.text, policy=cfg.cache,
                control=req.cache, compute=compute)
        t = getattr(answer, "timings", None)
        total_ms = (self._clock() - start) * 1e3
        # Built from values the pipeline produced itself: no re-validation on the hot path.
        timings = Timings.model_construct(
            queue_ms=t.queue_ms if t else 0.0, compute_ms=t.compute_ms if t else 0.0,
            swap_ms=t.swap_ms if t else 0.0, total_ms=total_ms)
        return InferenceResponse.model_construct(
            request_id=req.request_id, model=model, version=answer.version or version,
            outputs=dict(answer.outputs), served_by=answer.served_by,
            degraded=getattr(answer, "degraded", False), reason=getattr(answer, "reason", None),
            cache=outcome.tier, similarity=outcome.similarity, timings=timings, route=None,
            final=True,
        )

    async def _run_chain(self, req: InferenceRequest, cfg: ModelConfig, model: str, version: str,
                         inputs: dict[str, np.ndarray], pool: str, deadline: Deadline,
                         rows: int) -> _Answer:
        shed = self._admission(pool, req.priority, deadline)
        replies = ReplyLog()
        freq = FallbackRequest(model=model, inputs=inputs, version=version, text=req.text,
                               priority=req.priority, caller=req.caller,
                               request_id=req.request_id, extra={"replies": replies})
        key = (pool, req.priority)
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        try:
            res = await self.runner.run(
                freq, deadline=deadline, chain=self._chain(cfg),
                primary=None if shed else Target(model, version, pool), reason=shed)
        finally:
            self._in_flight[key] -= 1
        reply = replies.last() if res.served_by.split(":")[0] in ("gpu", "cpu", "model") else None
        timings = None
        if reply is not None:
            timings = Timings(queue_ms=reply.queue_ms, compute_ms=reply.compute_ms,
                              swap_ms=reply.swap_ms)
            if not res.degraded:
                prev = self._compute_s.get(model, reply.compute_ms / 1e3)
                self._compute_s[model] = 0.8 * prev + 0.2 * reply.compute_ms / 1e3
        return _Answer(outputs=_broadcast(res.outputs, rows), served_by=res.served_by,
                       version=res.version, degraded=res.degraded, reason=res.reason,
                       timings=timings)

    def _chain(self, cfg: ModelConfig) -> tuple[CompiledStep, ...]:
        cached = self._chains.get(cfg.name)
        if cached is None or cached[0] is not cfg:
            cached = (cfg, compile_chain(cfg.fallback, where=f"{cfg.name}.fallback"))
            self._chains[cfg.name] = cached
        return cached[1]

    def _admission(self, pool: str, priority: Priority, deadline: Deadline) -> str | None:
        """The shed reason, or None to admit (pure decision in policies.admission)."""
        if self.config.admission is None:
            return None
        stats = list(self.load(pool))
        delay = {p: max((s.queue_delay_s[p] for s in stats), default=0.0) for p in Priority}
        snap = AdmissionSnapshot(
            capacity=self.config.pool_capacity,
            in_flight={p: self._in_flight.get((pool, p), 0) for p in Priority},
            queue_delay_s=delay)
        decision = decide_admission(snap, priority=priority, budget_s=deadline.remaining(),
                                    config=self.config.admission)
        return None if decision.admit else f"shed: {decision.reason}"

    # -- routes -------------------------------------------------------------------------------
    async def _route(self, req: InferenceRequest, start: float) -> AsyncIterator[InferenceResponse]:
        rc = self.routes[req.model]
        strategy = self.strategies[req.model]
        deadline = Deadline.for_request(request_ms=req.deadline_ms, model_ms=None,
                                        app_default_ms=self.config.default_deadline_ms,
                                        clock=self._clock, arrival_s=req.arrival_s)
        first_model = rc.cheap or rc.expensive or ""
        entry, _ = await self.catalog.resolve(first_model, None)
        inputs = validate_inputs(entry.config, req.inputs)  # strategies score validated inputs
        rreq = RouteRequest(inputs=inputs, priority=req.priority,
                            deadline_s=deadline.remaining(), shadow_draw=self._rng())
        plan = strategy.plan(rreq)
        info = RouteInfo(route=rc.name, strategy=plan.strategy, decision=plan.decision)

        async def run(model: str, **kw) -> InferenceResponse:
            return await self._answer(req, model, None, start, deadline=deadline, **kw)

        if plan.kind is PlanKind.REFINE:
            assert plan.then is not None
            fast = await run(plan.first)
            yield _with_route(fast, info, [plan.first], final=False)
            refined = await run(plan.then)
            yield _with_route(refined, info.model_copy(update={"decision": "refined"}),
                              [plan.first, plan.then])
            return
        if plan.kind is PlanKind.SINGLE:
            yield await self._spillable(req, rc, plan.first, info, run, deadline, [])
            return
        cheap = await run(plan.first)
        if plan.shadow and plan.then:
            self._shadow(rc, req, cheap, run(plan.then))
        if cheap.degraded:
            yield _with_route(cheap, info.model_copy(update={"decision": "cheap"}), [plan.first])
            return
        verdict = strategy.after_cheap(np.asarray(cheap.outputs[rc.output]), rreq)
        info = info.model_copy(update={"confidence": verdict.confidence})
        if not verdict.escalate:
            yield _with_route(cheap, info.model_copy(update={"decision": "cheap"}), [plan.first])
            return
        assert plan.then is not None
        info = info.model_copy(update={"decision": "escalated"})
        resp = await self._spillable(req, rc, plan.then, info, run, deadline, [plan.first])
        if resp.route and not resp.route.spilled and len(verdict.rows) > 1:
            merged = merge_rows(cheap.outputs[rc.output], resp.outputs[rc.output], verdict.rows)
            resp = resp.model_copy(update={"outputs": {**resp.outputs, rc.output: merged}})
        yield resp

    async def _spillable(self, req, rc: RouteConfig, model: str, info: RouteInfo, run, deadline,
                         ran: list[str]) -> InferenceResponse:
        """Run ``model`` unless the pools' load says it would miss the deadline (then spill)."""
        is_expensive = model == rc.expensive and rc.spill != "none"
        primary = "gpu" if "gpu" in self.dispatcher.pools else "cpu"
        gpu_stats = list(self.load(primary))
        if not is_expensive or not gpu_stats:  # no load report yet: nothing to spill on
            return _with_route(await run(model), info, [*ran, model])
        key = (rc.name, req.priority)
        d = decide_spill(
            gpu=gpu_stats, priority=req.priority, deadline_s=deadline.remaining(),
            compute_s=self._compute_s.get(model, 0.0), target=rc.spill,
            state=self._spill.get(key, SpillState()), config=rc.spill_config,
            cpu=list(self.load("cpu")) if primary == "gpu" else None, now=self._clock())
        self._spill[key] = d.state
        if d.where == "gpu" or (d.where == "cpu" and primary == "cpu"):
            return _with_route(await run(model), info, [*ran, model])
        spilled = info.model_copy(update={"spilled": True, "decision": "spilled"})
        if d.where == "cpu":
            resp = await run(model, pool="cpu")
            return _with_route(resp, spilled, [*ran, model]).model_copy(
                update={"reason": resp.reason or f"spilled to cpu: {d.reason}"})
        assert rc.cheap is not None
        resp = await run(rc.cheap)
        return _with_route(resp, spilled, [*ran, rc.cheap]).model_copy(
            update={"degraded": True, "reason": resp.reason or f"spilled to cheap: {d.reason}"})

    def _shadow(self, rc: RouteConfig, req: InferenceRequest, cheap: InferenceResponse,
                expensive) -> None:
        """Run the other model too (in the background) and log both outcomes for training."""
        if not rc.outcome_log:
            expensive.close()
            return

        async def go() -> None:
            from router.route_training import outcome_line

            try:
                exp = await expensive
                line = outcome_line(rc.name, req.inputs, cheap.outputs[rc.output],
                                    exp.outputs[rc.output])
                await asyncio.to_thread(_append, rc.outcome_log, line)
            except Exception as e:  # shadow traffic never affects the answer
                log.info("shadow run for %s failed: %s", rc.name, e)

        task = asyncio.get_running_loop().create_task(go())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _record(self, req, resp, err, start: float) -> None:
        elapsed = self._clock() - start
        for r in self._recorders:
            try:
                r.record(req, resp, err, elapsed)
            except Exception:  # recording never fails a request
                log.exception("recorder %r failed", r)


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def _with_route(resp: InferenceResponse, info: RouteInfo, ran: list[str], *,
                final: bool = True) -> InferenceResponse:
    return resp.model_copy(update={"route": info.model_copy(update={"models_run": ran}),
                                   "final": final})


def _broadcast(outputs: Mapping[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    """Static/rule outputs configured for one row answer every row of the request."""
    out = {}
    for k, v in outputs.items():
        arr = np.asarray(v)
        if arr.ndim >= 1 and arr.shape[0] == 1 and rows != 1:
            arr = np.repeat(arr, rows, axis=0)
        out[k] = arr
    return out
