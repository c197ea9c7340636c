"""Executes routes (virtual models over a cheap and an expensive model), beside the pipeline.

The deciding side is the route's strategy (``policies.routing``: a plan before anything runs,
a verdict after the cheap answer) and the spill policy (``policies.spill``); this module only
carries the plan out: run the first model through the pipeline's one-model answer, escalate,
spill, refine, shadow. Ray-free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from common.tasks import cancel_and_wait
from fallbacks import Deadline, PoolName
from policies.estimates import ewma
from policies.priority import Priority
from policies.routing import TEXT_FEATURE, PlanKind, RouteRequest, RouteStrategy, merge_rows
from policies.spill import SpillState, decide_spill
from router.cache.embedder import Embedder
from router.catalog import ModelCatalog, config_of
from router.errors import InvalidRequest
from router.route_training import outcome_line
from router.routes import RouteConfig
from router.schemas import InferenceRequest, InferenceResponse, RouteInfo
from router.text_routing import text_outcome_line
from router.validation import validate_inputs

__all__ = ["AnswerFn", "RouteRunner"]

log = logging.getLogger(__name__)


class AnswerFn(Protocol):
    """The pipeline's one-model answer (cache, admission, chain) for a route step."""

    async def __call__(self, req: InferenceRequest, model: str, version: str | None,
                       start: float, *, pool: PoolName | None = None,
                       deadline: Deadline | None = None,
                       inputs: dict[str, np.ndarray] | None = None) -> InferenceResponse: ...


class RouteRunner:
    """Runs the routes of one pipeline; ``observe`` feeds it each model's compute time (the
    spill policy's cost estimate)."""

    def __init__(self, routes: Mapping[str, RouteConfig], strategies: Mapping[str, RouteStrategy],
                 answer: AnswerFn, catalog: ModelCatalog, *, pools: Sequence[str],
                 load: Callable[[str], Sequence], default_deadline_ms: float,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float], text_embedder: Embedder | None = None) -> None:
        self.routes = dict(routes)
        self.strategies = dict(strategies)
        text_routes = sorted(n for n, st in self.strategies.items() if st.reads_text)
        if text_routes and text_embedder is None:
            raise ValueError(f"routes {text_routes} score the request text but no text embedder "
                             "was given (pass the app's shared MiniLM embedder)")
        self._embedder = text_embedder
        self._answer = answer
        self._catalog = catalog
        self._primary = "gpu" if "gpu" in pools else "cpu"
        self._load = load
        self._default_ms = default_deadline_ms
        self._clock = clock
        self._rng = rng
        self._compute_s: dict[str, float] = {}  # EWMA of per-request compute, for spill
        self._spill: dict[tuple[str, Priority], SpillState] = {}
        self._background: set[asyncio.Task] = set()

    def observe(self, model: str, compute_s: float) -> None:
        """A model answered (not degraded) after ``compute_s`` of device time."""
        self._compute_s[model] = ewma(self._compute_s.get(model), compute_s)

    async def run(self, req: InferenceRequest, start: float) -> AsyncIterator[InferenceResponse]:
        """Answers in order: one, or the fast then the refined answer (fast-then-refine)."""
        rc = self.routes[req.model]
        strategy = self.strategies[req.model]
        deadline = Deadline.for_request(request_ms=req.deadline_ms, model_ms=None,
                                        app_default_ms=self._default_ms, clock=self._clock,
                                        arrival_s=req.arrival_s)
        first_model = rc.cheap or rc.expensive or ""
        entry, _ = await self._catalog.resolve(first_model, None)
        inputs = validate_inputs(config_of(entry), req.inputs)  # strategies score validated inputs
        scored = await self._with_text(rc, req, inputs) if strategy.reads_text else inputs
        rreq = RouteRequest(inputs=scored, priority=req.priority,
                            deadline_s=deadline.remaining(), shadow_draw=self._rng())
        plan = strategy.plan(rreq)
        info = RouteInfo(route=rc.name, strategy=plan.strategy, decision=plan.decision)

        async def run(model: str, **kw: Any) -> InferenceResponse:
            if model == first_model and "pool" not in kw:
                kw["inputs"] = inputs  # validated above: once per model
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
            resp = await self._spillable(req, rc, plan.first, info, run, deadline, [])
            if plan.shadow and rc.cheap and rc.expensive and not resp.degraded:
                # A learned router's training data: the model it did not pick runs too.
                if plan.first == rc.cheap:
                    self._shadow(rc, req, resp, run(rc.expensive))
                else:
                    self._shadow(rc, req, None, run(rc.cheap), expensive_answer=resp)
            yield resp
            return
        yield await self._cascade(req, rc, strategy, plan, rreq, info, run, deadline)

    async def _with_text(self, rc: RouteConfig, req: InferenceRequest,
                         inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``inputs`` plus the text's embedding (one per request: the embedder is shared with
        the semantic cache, which then reuses it), repeated for every input row."""
        if not req.text:
            raise InvalidRequest(f"text: route {rc.name!r} routes on the request text; send "
                                 "'text' (parameters.text over HTTP)", field="text")
        assert self._embedder is not None
        vec = (await asyncio.to_thread(self._embedder.embed, [req.text]))[0]
        rows = next(iter(inputs.values())).shape[0] if inputs else 1
        return {**inputs, TEXT_FEATURE: np.repeat(vec[None, :].astype(np.float64), rows, 0)}

    async def _cascade(self, req, rc: RouteConfig, strategy: RouteStrategy, plan, rreq,
                       info: RouteInfo, run, deadline: Deadline) -> InferenceResponse:
        cheap = await run(plan.first)
        if plan.shadow and plan.then:
            self._shadow(rc, req, cheap, run(plan.then))
        if cheap.degraded:
            return _with_route(cheap, info.model_copy(update={"decision": "cheap"}), [plan.first])
        verdict = strategy.after_cheap(np.asarray(cheap.outputs[rc.output]), rreq)
        info = info.model_copy(update={"confidence": verdict.confidence})
        if not verdict.escalate:
            return _with_route(cheap, info.model_copy(update={"decision": "cheap"}), [plan.first])
        assert plan.then is not None
        info = info.model_copy(update={"decision": "escalated"})
        resp = await self._spillable(req, rc, plan.then, info, run, deadline, [plan.first])
        if resp.route and not resp.route.spilled and len(verdict.rows) > 1:
            merged = merge_rows(cheap.outputs[rc.output], resp.outputs[rc.output], verdict.rows)
            resp = resp.model_copy(update={"outputs": {**resp.outputs, rc.output: merged}})
        return resp

    async def _spillable(self, req: InferenceRequest, rc: RouteConfig, model: str,
                         info: RouteInfo, run, deadline: Deadline,
                         ran: list[str]) -> InferenceResponse:
        """Run ``model`` unless the pools' load says it would miss the deadline (then spill)."""
        is_expensive = model == rc.expensive and rc.spill != "none"
        gpu_stats = list(self._load(self._primary))
        if not is_expensive or not gpu_stats:  # no load report yet: nothing to spill on
            return _with_route(await run(model), info, [*ran, model])
        key = (rc.name, req.priority)
        d = decide_spill(
            gpu=gpu_stats, priority=req.priority, deadline_s=deadline.remaining(),
            compute_s=self._compute_s.get(model, 0.0), target=rc.spill,
            state=self._spill.get(key, SpillState()), config=rc.spill_config,
            cpu=list(self._load("cpu")) if self._primary == "gpu" else None, now=self._clock())
        self._spill[key] = d.state
        if d.where == "gpu" or (d.where == "cpu" and self._primary == "cpu"):
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

    def _shadow(self, rc: RouteConfig, req: InferenceRequest, cheap: InferenceResponse | None,
                other, *, expensive_answer: InferenceResponse | None = None) -> None:
        """Run the other model too (in the background) and log both outcomes for training:
        ``other`` runs the expensive model (or, with ``expensive_answer``, the cheap one)."""
        path = rc.outcome_log
        if not path:
            other.close()
            return

        async def go() -> None:
            try:
                nonlocal cheap
                if expensive_answer is None:
                    exp = await other
                else:
                    exp, cheap = expensive_answer, await other
                assert cheap is not None
                line = outcome_line(rc.name, req.inputs, cheap.outputs[rc.output],
                                    exp.outputs[rc.output])
                if req.text:  # the text format (router.text_routing); reference: expensive
                    line = text_outcome_line(rc.name, req.text, _agree(cheap, exp, rc.output),
                                             True, inputs=req.inputs,
                                             cheap_logits=cheap.outputs[rc.output])
                await asyncio.to_thread(_append, path, line)
            except Exception as e:  # noqa: BLE001 - shadow traffic never affects the answer
                log.info("shadow run for %s failed: %s", rc.name, e)

        task = asyncio.get_running_loop().create_task(go())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Cancel the background (shadow) runs; the pipeline's owner calls it on shutdown."""
        await cancel_and_wait(list(self._background))


def _agree(cheap: InferenceResponse, exp: InferenceResponse, output: str) -> bool:
    """Whether the cheap answer matches the expensive one (per-row argmax of ``output``)."""
    c, e = np.asarray(cheap.outputs[output]), np.asarray(exp.outputs[output])
    if c.shape != e.shape:
        return False
    rows = c.shape[0] if c.ndim else 1
    return bool(np.array_equal(c.reshape(rows, -1).argmax(1), e.reshape(rows, -1).argmax(1)))


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def _with_route(resp: InferenceResponse, info: RouteInfo, ran: list[str], *,
                final: bool = True) -> InferenceResponse:
    return resp.model_copy(update={"route": info.model_copy(update={"models_run": ran}),
                                   "final": final})
