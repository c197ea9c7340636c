"""The request pipeline: accept → cache → admit → dispatch → degrade → record.

Ray-free: the catalog fetcher, the pool clients, the pools' load view and the cache are injected,
so the same pipeline runs in the ingress deployment, in unit tests and in benchmarks. A request
is resolved and validated once, then travels as one ``pool.work.PoolWork`` through the fallback
chain to a pool; the pool's reply (timings included) comes back inside the chain's result.
Routes (virtual models) are carried out by ``router.route_runner``.

Order note: the cache is consulted before admission control, so a shed request still gets an
exact cache hit (cheaper and better than its fallback); only the compute is shed.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from fallbacks import (
    BreakerRegistry,
    CallerQuotas,
    ChainConfig,
    ChainResult,
    ChainRunner,
    Deadline,
    PoolName,
    PoolThrottles,
    QuotaLease,
    Target,
)
from policies.admission import (
    DEFAULT_OBJECTIVES,
    AdmissionConfig,
    AdmissionSnapshot,
    admission_floors,
    admits_at_once,
    decide_admission,
)
from policies.priority import PRIORITIES, Priority
from policies.routing import RouteStrategy
from pool.config import ModelConfig
from pool.work import PoolWork
from router.cache import Answer, CacheOutcome, Embedder, ResultCache
from router.catalog import ModelCatalog, config_of
from router.pool_client import PoolClient, PoolExecutor, RoutedRequest
from router.pool_load import least_wait_s
from router.route_runner import RouteRunner
from router.routes import RouteConfig
from router.schemas import InferenceRequest, InferenceResponse, Timings, unchecked
from router.validation import output_dtypes, validate_inputs

__all__ = ["PipelineConfig", "Pipeline", "Recorder", "choose_pool"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    default_deadline_ms: float = 1000.0
    chain: ChainConfig = field(default_factory=ChainConfig)
    admission: AdmissionConfig | None = field(default_factory=AdmissionConfig)
    pool_capacity: int = 64  # requests a pool holds in flight before classes start being shed
    # the operator's latency objectives per class and the deadline margin, the edge's
    # (edge.admission): one admission rule, fed here by the pool's published waits
    objectives: Mapping[str, float | None] = field(
        default_factory=lambda: dict(DEFAULT_OBJECTIVES))
    deadline_margin_s: float = 0.0
    # SRE client-side adaptive throttling per (model, pool): reject locally, at once and
    # labelled, once a pool accepts fewer than 1/k of a model's calls. Off (None) by default:
    # it rejects before the circuit breaker sees enough calls to open, and with little probe
    # traffic its window makes a recovered model wait (the fault drills show both).
    throttle_k: float | None = None


class Recorder:
    """Sees every request once it has its final answer or error (metrics, call log, alerts)."""

    def record(self, request: InferenceRequest, response: InferenceResponse | None,
               error: BaseException | None, elapsed_s: float) -> None:  # pragma: no cover
        raise NotImplementedError


# No quotas configured: one reusable, stateless context stands in for a lease.
_NO_QUOTA = contextlib.nullcontext()


def choose_pool(config: ModelConfig, pools: Sequence[str]) -> PoolName:
    """Where a model runs: the GPU pool unless it is CPU-only or there is none."""
    return "gpu" if config.device in ("gpu", "any") and "gpu" in pools else "cpu"


_NOT_CACHED = CacheOutcome("off")


class Pipeline:
    def __init__(
        self,
        catalog: ModelCatalog,
        pools: Mapping[str, PoolClient],
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
        wall: Callable[[], float] = time.time,
        text_embedder: Embedder | None = None,
    ) -> None:
        self.catalog = catalog
        self.pools = dict(pools)
        self._pool_names = tuple(self.pools)  # choose_pool's view, built once
        self.config = config
        self.cache = cache
        self.quotas = quotas
        self.load = load
        self._recorders = tuple(recorders)
        self._clock = clock
        self._wall = wall
        # Per-(model, pool) circuit breakers and adaptive throttles guard failing or overloaded
        # models; keyed per model, so one broken model never throttles the others on its pool.
        throttles = (None if config.throttle_k is None
                     else PoolThrottles(k=config.throttle_k, clock=clock))
        self.runner = ChainRunner(PoolExecutor(catalog, self.pools, clock=clock, wall=wall),
                                  config=config.chain, breakers=breakers, throttles=throttles,
                                  clock=clock,
                                  default_pool="gpu" if "gpu" in self.pools else "cpu")
        self.route_runner = RouteRunner(
            routes or {}, strategies or {}, self._answer, catalog, pools=tuple(self.pools),
            load=load, default_deadline_ms=config.default_deadline_ms, clock=clock, rng=rng,
            text_embedder=text_embedder)
        self._in_flight: dict[tuple[str, Priority], int] = {}
        self._pool_in_flight: dict[str, int] = {}  # the sum of _in_flight over classes
        self._targets: dict[tuple[str, str | None, PoolName], Target] = {}
        self._floors = (admission_floors(config.admission, config.objectives)
                        if config.admission else (0.0, 0.0))
        self._wait_cache: dict[str, tuple[Sequence, dict[Priority, float], float]] = {}

    @property
    def routes(self) -> dict[str, RouteConfig]:
        return self.route_runner.routes

    # -- entry points ---------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """The final answer (for fast-then-refine routes: the refined one)."""
        if request.model not in self.routes:  # the common case, without the generator's cost
            start = self._clock()
            try:  # a quota rejection (429) is recorded like any other outcome
                quota = (await self.quotas.admit(request.caller) if self.quotas
                         else _NO_QUOTA)
                with quota:
                    resp = _quota_label(
                        await self._answer(request, request.model, request.version, start), quota)
            except Exception as e:
                self._record(request, None, e, start)
                raise
            self._record(request, resp, None, start)
            return resp
        last = None
        async for resp in self.stream(request):
            last = resp
        assert last is not None
        return last

    async def stream(self, req: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Answers in order; one unless the target is a fast-then-refine route."""
        start = self._clock()
        try:  # a quota rejection (429) is recorded like any other outcome
            quota = (await self.quotas.admit(req.caller) if self.quotas
                     else _NO_QUOTA)
            with quota:
                if req.model in self.routes:
                    async for resp in self.route_runner.run(req, start):
                        resp = _quota_label(resp, quota)
                        if resp.final:
                            self._record(req, resp, None, start)
                        yield resp
                else:
                    resp = _quota_label(await self._answer(req, req.model, req.version, start),
                                        quota)
                    self._record(req, resp, None, start)
                    yield resp
        except Exception as e:
            self._record(req, None, e, start)
            raise

    # -- one model: cache, admission, chain -------------------------------------------------
    async def _answer(self, req: InferenceRequest, model: str, version: str | None, start: float,
                      *, pool: PoolName | None = None, deadline: Deadline | None = None,
                      inputs: dict[str, np.ndarray] | None = None) -> InferenceResponse:
        """One model's answer, in three steps: the cache's lookup, on a miss the fallback
        chain (the model, then its fallbacks), then the cache's store. ``inputs`` when the
        caller already validated them for this model."""
        entry, version = await self.catalog.resolve(model, version)
        cfg = config_of(entry)
        cache = self.cache
        answer: Answer
        if cache is None:
            answer = await self._compute(req, model, version, cfg, start, pool, deadline, inputs)
            outcome = _NOT_CACHED
        else:
            # Keyed on the inputs as sent (dtype included: [1, 2] as int and as float differ),
            # computed on the validated, cast ones.
            found = await cache.lookup(model=model, version=version, inputs=req.inputs,
                                       text=req.text, policy=cfg.cache, control=req.cache)
            outcome = found.outcome
            if found.answer is None:  # a miss: computed once for every caller of the key
                try:
                    computed = await self._compute(req, model, version, cfg, start, pool,
                                                   deadline, inputs)
                except BaseException as e:
                    cache.release(found, e)
                    raise
                await cache.store(found, computed, not computed.degraded)
                answer = computed
            else:
                answer = found.answer
                if found.verify is not None:  # a semantic hit sampled for a check
                    cache.verify_in_background(found, partial(
                        self._recompute, req, model, version, cfg, start, pool))
        t = getattr(answer, "reply", None)  # a hit's answer has none: no pool timings
        total_ms = (self._clock() - start) * 1e3
        # Unchecked: every value below is the pipeline's own, of its field's type (the test
        # ``test_an_answer_is_built_as_validation_would`` holds it so)
        timings = unchecked(Timings, {
            "queue_ms": float(t.queue_ms), "compute_ms": float(t.compute_ms),
            "swap_ms": float(t.swap_ms), "total_ms": total_ms} if t else {
            "queue_ms": 0.0, "compute_ms": 0.0, "swap_ms": 0.0, "total_ms": total_ms})
        return unchecked(InferenceResponse, {
            "request_id": req.request_id, "model": model, "version": answer.version or version,
            "outputs": dict(answer.outputs), "served_by": answer.served_by,
            "degraded": getattr(answer, "degraded", False),
            "reason": getattr(answer, "reason", None), "cache": outcome.tier,
            "similarity": outcome.similarity, "timings": timings,
            "pool": getattr(answer, "pool", None), "route": None, "final": True,
            "caller": req.caller, "caller_verified": req.caller_verified, "quota": None})

    async def _compute(self, req: InferenceRequest, model: str, version: str,
                       cfg: ModelConfig, start: float, pool: PoolName | None,
                       deadline: Deadline | None, inputs: dict[str, np.ndarray] | None
                       ) -> ChainResult:
        """A miss: validate the inputs and build the work (a hit skips both: its inputs were
        validated when its answer was computed, and the key holds the model, version and the
        inputs' bytes), then run the chain."""
        valid = inputs if inputs is not None else validate_inputs(cfg, req.inputs)
        dl = deadline or Deadline.for_request(
            request_ms=req.deadline_ms, model_ms=cfg.deadline_ms,
            app_default_ms=self.config.default_deadline_ms, clock=self._clock,
            arrival_s=req.arrival_s)
        now = self._clock()
        wall = self._wall()
        work = PoolWork(model, version, valid, req.priority,
                        deadline_at=wall + max(0.0, dl.at - now),  # dl.remaining() at now
                        arrived_at=wall - (now - (start if req.arrival_s is None
                                                  else req.arrival_s)),
                        caller=req.caller, request_id=req.request_id, config=cfg)
        return await self._run_chain(req, work, pool or choose_pool(cfg, self._pool_names), dl)

    async def _recompute(self, req: InferenceRequest, model: str, version: str,
                         cfg: ModelConfig, start: float, pool: PoolName | None
                         ) -> tuple[ChainResult, bool]:
        """Verified mode's check of a served semantic hit, in the background: the model's own
        answer (within the request's deadline, as the request's own computation would be), and
        whether it may stand as evidence (a degraded one proves nothing)."""
        res = await self._compute(req, model, version, cfg, start, pool, None, None)
        return res, not res.degraded

    async def _run_chain(self, req: InferenceRequest, work: PoolWork, pool: PoolName,
                         deadline: Deadline) -> ChainResult:
        assert work.config is not None
        shed = req.shed_reason or self._admission(pool, req.priority, deadline)
        freq = RoutedRequest(model=work.model, inputs=work.inputs, version=work.version,
                             text=req.text, priority=req.priority, caller=req.caller,
                             request_id=req.request_id, work=work)
        key = (pool, req.priority)
        self._in_flight[key] = self._in_flight.get(key, 0) + 1
        self._pool_in_flight[pool] = self._pool_in_flight.get(pool, 0) + 1
        try:
            res = await self.runner.run(
                freq, deadline=deadline, chain=self.catalog.chain(work.model),
                primary=None if shed else self._target(work.model, work.version, pool),
                reason=shed, local_only=req.shed_reason is not None)  # edge-shed: no pool
        finally:
            self._in_flight[key] -= 1
            self._pool_in_flight[pool] -= 1
        reply = res.reply
        if reply is not None and not res.degraded:  # a model answered: its pool's timings
            self.route_runner.observe(work.model, reply.compute_ms / 1e3)
        rows = next(iter(work.inputs.values())).shape[0]
        # the chain's own result is the answer the cache and its sharers see (labels, reply
        # and pool included): only its outputs are put in the request's rows and dtypes
        res.outputs = _broadcast(res.outputs, rows, work.config)
        return res

    def _target(self, model: str, version: str | None, pool: PoolName) -> Target:
        """The primary call's target, built once per (model, version, pool): bounded by the
        repository, and cleared whole if reloads ever fill it."""
        key = (model, version, pool)
        target = self._targets.get(key)
        if target is None:
            if len(self._targets) >= 4096:
                self._targets.clear()
            target = self._targets[key] = Target(model, version, pool)
        return target

    def _admission(self, pool: str, priority: Priority, deadline: Deadline) -> str | None:
        """The shed reason, or None to admit (pure decisions in policies.admission)."""
        config = self.config.admission
        if config is None:
            return None
        delay, longest = self._waits(pool)
        budget_s = deadline.remaining()
        margin_s = self.config.deadline_margin_s
        if admits_at_once(self._floors, in_flight=self._pool_in_flight.get(pool, 0),
                          capacity=self.config.pool_capacity, longest_delay_s=longest,
                          budget_s=budget_s, margin_s=margin_s):
            return None  # what decide_admission would say, without building its snapshot
        in_flight = {p: self._in_flight.get((pool, p), 0) for p in PRIORITIES}
        snap = AdmissionSnapshot(capacity=self.config.pool_capacity, in_flight=in_flight,
                                 queue_delay_s=delay)
        decision = decide_admission(snap, priority=priority, budget_s=budget_s, config=config,
                                    objectives=self.config.objectives, margin_s=margin_s)
        return None if decision.admit else f"shed: {decision.reason}"

    def _waits(self, pool: str) -> tuple[dict[Priority, float], float]:
        """Each class's wait where a request would run (Ray's router sends it to the least-loaded
        replica) and the longest of them; recomputed only when the pool's load view changes."""
        stats = self.load(pool)
        cached = self._wait_cache.get(pool)
        if cached is None or cached[0] is not stats:
            delay = {p: least_wait_s(stats, p) for p in PRIORITIES}
            cached = (stats, delay, max(delay.values()))
            self._wait_cache[pool] = cached
        return cached[1], cached[2]

    async def close(self) -> None:
        """Cancel the background (shadow) runs; the owner calls it on shutdown."""
        await self.route_runner.close()

    def _record(self, req, resp, err, start: float) -> None:
        elapsed = self._clock() - start
        for r in self._recorders:
            try:
                r.record(req, resp, err, elapsed)
            except Exception:  # recording never fails a request
                log.exception("recorder %r failed", r)


def _broadcast(outputs: Mapping[str, np.ndarray], rows: int, cfg: ModelConfig
               ) -> dict[str, np.ndarray]:
    """Static/rule outputs configured for one row answer every row of the request, in the
    model's declared output dtypes (typed clients must not see FP64 exactly when degraded)."""
    dtypes = output_dtypes(cfg)
    out = {}
    for k, v in outputs.items():
        arr = np.asarray(v)
        if k in dtypes and arr.dtype != dtypes[k]:
            arr = arr.astype(dtypes[k])
        if arr.ndim >= 1 and arr.shape[0] == 1 and rows != 1:
            arr = np.repeat(arr, rows, axis=0)
        out[k] = arr
    return out


def _quota_label(resp: InferenceResponse, quota: object) -> InferenceResponse:
    """Label an answer whose rate limit was decided by this replica alone (quota store down)."""
    if isinstance(quota, QuotaLease) and quota.local_fallback:
        return resp.model_copy(update={"quota": "local"})
    return resp
