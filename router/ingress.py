"""The ingress deployment: HTTP (v2) and handle methods over one Pipeline.

A thin adapter: it builds the Ray-free pieces from ``AppSettings`` (catalog, pipeline, cache,
breakers, recorders), keeps the catalog and the pools' load fresh, evaluates alert rules and
forwards alert events to the alerter deployment fire-and-forget.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from alerting.config import load_config
from alerting.otlp import otlp_span_processor
from alerting.rules import MetricsSnapshot, RuleEvaluator
from alerting.telemetry import Telemetry
from common.tasks import cancel_and_wait
from fallbacks import BreakerRegistry, BreakerState, StateTransition
from fallbacks.cluster_quotas import ClusterQuotas
from pool.control import ControlFile
from pool.host import PROBLEM_STATES
from pool.publish import Publisher
from pool.repository import ModelRepository, version_order
from pool.request_router import published_stats
from router._private.callers import digest, identify
from router._private.cluster import build_quotas, build_views, own_view, quota_stores_down
from router._private.model_stats import ModelStatsRecorder
from router._private.pool_totals import PoolTotals
from router._private.recorders import CallLogRecorder, CounterRecorder, TelemetryRecorder
from router._private.wiring import embedder, route_strategies, serve_metrics, start_local_pool
from router.cache import ResultCache
from router.cache._private.metrics import register_error_rate_metric
from router.calllog import build_call_log
from router.catalog import ModelCatalog
from router.edge import EdgeGate, mount_edge, outside
from router.errors import (
    InvalidRequest,
    ModelNotFound,
    ServiceUnavailable,
    TimeshareError,
)
from router.grpc_v2.listener import start_grpc
from router.grpc_v2.service import InferenceService
from router.http import build_http_app
from router.http_infer import InferEndpoint
from router.listener import LISTENER_METRIC, start_listener
from router.pipeline import Pipeline, PipelineConfig, Recorder
from router.pool_client import LocalPoolClient, PoolClient, RemotePoolClient
from router.pool_load import PoolLoads
from router.schemas import MAX_REQUESTS_PER_CALL, InferenceRequest, InferenceResponse
from router.settings import AppSettings
from router.tracing import RequestTracer, TraceContextMiddleware, TracedPipeline
from router.v2 import model_metadata, route_metadata

__all__ = ["Ingress"]

log = logging.getLogger("ray.serve")


@serve.deployment(name="Ingress", max_ongoing_requests=512)
@serve.ingress()
class Ingress:
    async def __init__(self, settings: AppSettings, pools: dict[str, DeploymentHandle],  # type: ignore[misc]
                       alerter: DeploymentHandle | None = None) -> None:
        self.settings = s = settings
        self.api_key = s.resolved_api_key()
        # Keys are looked up by digest: a dict probe on the secret itself would leak timing.
        caller_keys = s.resolved_caller_keys()  # the args', else $caller_keys_env's
        self._caller_keys = None if caller_keys is None else {
            digest(k): who for k, who in caller_keys.items()}
        self.max_body_bytes = s.max_body_bytes
        self.publisher = Publisher(s.repository, trust=s.trust, settings=s.publish)  # #21
        self._pools: dict[str, PoolClient] = {n: RemotePoolClient(h, published_stats)
                                               for n, h in pools.items()}
        self._load = PoolLoads()  # every pool replica's latest stats, for spill and shedding
        self._local = await start_local_pool(s)
        if self._local is not None:
            local = self._pools["cpu"] = LocalPoolClient(self._local)
            self._load.read_live("cpu", local.live_stats)  # its queue as it is, when asked
        self._alerter = alerter
        self._control = ControlFile(s.resolved_state_dir())
        self._pool_totals = PoolTotals()  # every pool replica's counters: metrics and alerts
        self.catalog = ModelCatalog(self._fetch_index, allow=s.trust.allowlist)
        tm = s.telemetry
        self.telemetry = Telemetry(  # spans only with an endpoint (router.tracing)
            prometheus=s.prometheus_port is not None, sample_ratio=tm.sample_ratio,
            span_processor=None if tm.otlp_endpoint is None else otlp_span_processor(
                tm.otlp_endpoint, max_queue_size=tm.max_queue_spans,
                max_export_batch_size=tm.max_export_batch,
                schedule_delay_ms=tm.export_interval_ms, export_timeout_ms=tm.export_timeout_ms))
        self.telemetry.observe_devices(self._pool_totals.live, self._pool_totals.restarts)
        # per model (rate, p99, shares) and per priority class (rate, p50/p99, shed, refused)
        self.model_stats = ModelStatsRecorder()
        if s.prometheus_port is not None:
            serve_metrics(s.prometheus_port)
        self.counters = CounterRecorder(slow_s=s.slow_request_s)
        # None where the operator turned it off (``call_log.path`` null, no ``redis_url``)
        self.call_log = build_call_log(path=s.call_log.path, redis_url=s.call_log.redis_url,
                                       max_queue=s.call_log.max_queue) \
            if s.call_log.path or s.call_log.redis_url else None
        self._quotas = build_quotas(s)  # cluster-wide through Redis when configured (#19)
        self._views = build_views(s)  # every replica's breakers etc. in /v2/status (#19)
        self.breakers = BreakerRegistry(default=s.breaker, listeners=(self._on_breaker,))
        self.telemetry.observe_breakers(lambda: {k: st.value.lower() for k, st in
                                                 self.breakers.states().items()})
        self.pipeline = self._build_pipeline(s)
        self._infer_endpoint = InferEndpoint(self)
        # one admission for every front door of this replica: HTTP (both ports) and gRPC
        self._gate = (EdgeGate(s.edge, on_refused=self.model_stats.edge_refused)
                      if s.edge.enabled else None)
        self._app = mount_edge(build_http_app(self), settings=s.edge,
                               max_body_bytes=s.max_body_bytes,
                               default_deadline_ms=s.default_deadline_ms,
                               infer=self._infer_endpoint, gate=self._gate)
        # the listener's app: the same edge, in front of FastAPI's layers (router.edge.outside)
        listener_app = outside(self._app)
        if self.telemetry.tracing:  # a caller's traceparent is the request's parent
            self._app.add_middleware(TraceContextMiddleware)
            listener_app = TraceContextMiddleware(listener_app)
        self._listener = await start_listener(listener_app, s.listener)  # #13: Serve's hop skipped
        self._grpc = await start_grpc(  # #39: the Open Inference Protocol over gRPC
            InferenceService(self, gate=self._gate, default_deadline_ms=s.default_deadline_ms,
                             deadline_margin_ms=s.grpc.deadline_margin_ms,
                             request_start_max_age_s=(s.grpc.request_start_max_age_s
                                                      if s.grpc.request_start else None),
                             stream_max_in_flight=s.grpc.stream_max_in_flight),
            s.grpc, max_message_bytes=s.max_body_bytes)
        self._tasks = [asyncio.get_running_loop().create_task(self._refresh_loop())]
        if alerter is not None:
            self._start_alerting(s)

    def _build_pipeline(self, s: AppSettings) -> Pipeline:
        """Routes, strategies, the shared embedder and the cache, and the pipeline over them."""
        routes, strategies = route_strategies(s)
        # One shared embedder: a text route's embedding is the semantic cache's (#18).
        text = embedder(s, routes_read_text=any(st.reads_text for st in strategies.values()))
        self.cache = ResultCache(s.cache, embedder=text, on_event=self._on_cache_event)
        register_error_rate_metric(self.telemetry.meter_provider, self.cache.verification)
        # Tracing on: the pipeline that stamps its stages; off: the plain one, untouched.
        make: Callable[..., Pipeline] = (
            functools.partial(TracedPipeline, tracer=RequestTracer(self.telemetry.tracer))
            if self.telemetry.tracing else Pipeline)
        # Timeshare's request histograms only where something collects them
        # (``prometheus_port``); alert counters and /v2/status always; the call log unless the
        # operator turned it off.
        recorders: list[Recorder] = [self.counters, self.model_stats]
        if self.telemetry.histograms_exported:
            recorders.insert(0, TelemetryRecorder(self.telemetry))
        if self.call_log is not None:
            recorders.append(CallLogRecorder(self.call_log))
        return make(
            self.catalog, self._pools,
            config=PipelineConfig(default_deadline_ms=s.default_deadline_ms,
                                  admission=s.admission, pool_capacity=s.pool_capacity,
                                  objectives=s.edge.admission.max_queue_delay_s,
                                  deadline_margin_s=s.edge.admission.deadline_margin_s),
            routes=routes,
            strategies=strategies, text_embedder=text,
            cache=self.cache, breakers=self.breakers,
            quotas=self._quotas,
            load=self._load.get,
            recorders=recorders,
        )

    def _start_alerting(self, s: AppSettings) -> None:
        cfg = load_config(s.alerting or {})
        self._evaluator = RuleEvaluator(cfg.rules, cfg.environment)
        self._tasks.append(asyncio.get_running_loop().create_task(self._alert_loop()))

    def __serve_build_asgi_app__(self):
        """Serve asks for the ASGI app after __init__; it is built over this instance."""
        return self._app

    async def __del__(self) -> None:
        """Serve calls this on shutdown: stop the background loops, flush the call log."""
        if not hasattr(self, "_app"):  # __init__ failed part way: nothing of ours is running
            return
        if (listener := getattr(self, "_listener", None)) is not None:
            await listener.stop()  # first: its requests in flight still need the rest
        if (grpc_listener := getattr(self, "_grpc", None)) is not None:
            await grpc_listener.stop()
        await cancel_and_wait(self._tasks)
        await self.pipeline.close()
        if self.call_log is not None:
            await self.call_log.close(timeout_s=2.0)
        if isinstance(self._quotas, ClusterQuotas):
            await self._quotas.close()
        await self._views.close()
        if self._local is not None:
            await self._local.close()
        if self.telemetry.tracing:  # export what is queued (bounded by export_timeout_ms)
            await asyncio.to_thread(self.telemetry.tracer_provider.shutdown)

    async def record_autoscaling_stats(self) -> dict[str, float]:  # Serve's count + listeners'
        ongoing = self._listener.ongoing if self._listener else 0
        if self._grpc is not None:
            ongoing += self._grpc.service.ongoing
        return {LISTENER_METRIC: float(ongoing)}

    # -- background ---------------------------------------------------------------------------
    async def _fetch_index(self):
        return await self._pools["cpu"].index()

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.catalog.refresh()
                await self._load.refresh(self._pools)
                for pool, client in self._pools.items():
                    self._pool_totals.observe(pool, await client.counters())
                self.breakers.poll()
                await self._views.publish(self._own_view())
            except Exception as e:  # pools restarting: keep the last view
                log.warning("catalog refresh failed: %s", e)
            await asyncio.sleep(min(self.settings.poll_interval_s, 1.0))

    async def _alert_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.alert_eval_interval_s)
            try:
                failed = self.catalog.failed_models()
                channels = await self._failing_channels()
                snap = MetricsSnapshot(
                    at=time.time(), models=self.counters.snapshot(),
                    open_breakers=frozenset(f"{m}@{p}" for (m, p), st in
                                            self.breakers.states().items()
                                            if st is BreakerState.OPEN),
                    failed_models=failed,
                    device_memory_used=self._load.memory_used(),
                    cache_tiers_down=frozenset() if self.cache.redis_available is not False
                    else frozenset({"redis"}),
                    failing_channels=channels, swaps=self._pool_totals.swaps(),
                    replica_restarts=sum(self._pool_totals.restarts().values()),
                    quota_stores_down=quota_stores_down(self._quotas))
                for alert in self._evaluator.evaluate(snap):
                    self._alert(alert.to_dict())
            except Exception:  # alerting never takes serving down
                log.exception("alert evaluation failed")

    async def _failing_channels(self) -> frozenset[str]:  # for the channel_failing rule
        if self._alerter is None:
            return frozenset()
        try:
            return frozenset(await asyncio.wait_for(
                self._alerter.failing_channels.remote(), self.settings.alert_eval_interval_s))
        except Exception as e:  # the alerter restarting: no news is not a failure
            log.warning("alerter channel status unavailable: %s", e)
            return frozenset()

    def _own_view(self) -> dict[str, Any]:
        return own_view(self.breakers, self._quotas, self.cache.redis_available,
                        None if self._gate is None else self._gate.state.counts)

    def _alert(self, alert: dict[str, Any]) -> None:
        if self._alerter is not None:
            self._alerter.submit.remote(alert)  # fire-and-forget

    def _on_breaker(self, t: StateTransition) -> None:
        model, pool = t.key
        log.warning("breaker %s@%s: %s -> %s", model, pool, t.from_state, t.to_state)

    def _on_cache_event(self, kind: str, detail: dict) -> None:
        log.warning("cache event %s: %s", kind, detail)

    # -- handle API -----------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one inference (the handle API). Raises typed ``router.errors`` exceptions on bad
        input, and :class:`router.errors.Overloaded` (with ``retry_after_s``) when the edge's
        admission, the same one HTTP and gRPC requests pass, turns it away."""
        req = self._accept(request)
        if self._gate is None:
            return await self.pipeline.infer(req)
        return await self._gate.run(req, **self._budget(req), answer=self.pipeline.infer)

    async def infer_many(self, requests: list[InferenceRequest],
                         ) -> list[InferenceResponse | TimeshareError]:
        """Several independent inferences in one handle call (``router.client`` sends its
        concurrent callers' requests this way). Each runs exactly as :meth:`infer` would run it
        alone, concurrently with the others; the answers come back in order, each an
        ``InferenceResponse`` or the typed error that request alone raised. Only a call that is
        not a list of 1..``MAX_REQUESTS_PER_CALL`` entries raises (``InvalidRequest``,
        ``requests``)."""
        if not isinstance(requests, list) or not 1 <= len(requests) <= MAX_REQUESTS_PER_CALL:
            got = f"{len(requests)} entries" if isinstance(requests, list) else \
                type(requests).__name__
            raise InvalidRequest(f"requests: expected a list of 1..{MAX_REQUESTS_PER_CALL} "
                                 f"router.schemas.InferenceRequest, got {got}", field="requests")
        outcomes = await asyncio.gather(*(self._one_of_many(i, r) for i, r in
                                          enumerate(requests)), return_exceptions=True)
        return [o if isinstance(o, (InferenceResponse, TimeshareError)) else _internal(o)
                for o in outcomes]

    async def _one_of_many(self, i: int, request: Any) -> InferenceResponse:
        if not isinstance(request, InferenceRequest):
            raise InvalidRequest(f"requests[{i}]: expected router.schemas.InferenceRequest, "
                                 f"got {type(request).__name__}", field=f"requests[{i}]")
        return await self.infer(request)

    async def answer(self, request: InferenceRequest) -> InferenceResponse:
        """One request a front end in this replica (HTTP, gRPC) has let through its gate."""
        # Traced or not is decided once, by the pipeline's class (router.tracing).
        return await self.pipeline.infer(self._accept(request))

    def stream(self, request: InferenceRequest):
        return self.pipeline.stream(self._accept(request))

    async def infer_stream(self, request: InferenceRequest):
        """Stream answers (``handle.options(stream=True).infer_stream.remote(req)``): one, or
        the fast then the refined answer of a fast-then-refine route; through the same
        admission as :meth:`infer`."""
        req = self._accept(request)
        answers = (self.pipeline.stream(req) if self._gate is None else
                   self._gate.stream(req, **self._budget(req), answers=self.pipeline.stream))
        async for resp in answers:
            yield resp

    def _budget(self, req: InferenceRequest) -> dict[str, float]:
        """What the gate reads of an accepted handle call: its time since arrival and its
        whole budget (the request's deadline, else the app's default; the HTTP edge and the
        gRPC service read the same)."""
        assert req.arrival_s is not None  # _accept stamps it
        deadline_ms = req.deadline_ms or self.settings.default_deadline_ms
        return {"elapsed_s": time.monotonic() - req.arrival_s, "deadline_s": deadline_ms / 1e3}

    async def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pools": {}}
        for name, pool in self._pools.items():
            try:
                out["pools"][name] = await pool.status()
            except Exception as e:
                out["pools"][name] = {"error": f"{type(e).__name__}: {e}"}
        out["breakers"] = {f"{m}@{p}": st.value.lower()
                           for (m, p), st in self.breakers.states().items()}
        out["replica"] = self._views.replica  # who answered; "ingress": every replica's view
        out["ingress"] = await self._views.collect(self._own_view())
        out["cache"] = {"counters": self.cache.counters(),
                        "redis_available": self.cache.redis_available}
        verified = self.cache.verification()  # vCache-style mode (#18): observed error rate
        if verified is not None:
            out["cache"]["verified"] = verified.as_dict()
        out["routes"] = sorted(self.pipeline.routes)
        out["models"] = self.model_stats.snapshot()
        out["classes"] = self.model_stats.classes.snapshot()
        evaluator = getattr(self, "_evaluator", None)
        out["firing_alerts"] = [] if evaluator is None else [dict(a.labels)
                                                             for a in evaluator.firing()]
        out["caller_keys"] = self._caller_keys is not None
        if self._alerter is not None:
            try:
                out["alerts"] = await self._alerter.status.remote()
            except Exception as e:
                out["alerts"] = {"error": f"{type(e).__name__}: {e}"}
        return out

    # -- Frontend (HTTP) --------------------------------------------------------------------
    def live_models(self):
        return self.catalog.snapshot()

    async def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        """v2 metadata of a model or a route (a virtual model: its models' tensors)."""
        if name in self.pipeline.routes:
            rc = self.pipeline.routes[name]
            models = await self._route_models(name, version)
            entry, _ = await self.catalog.resolve(models[0], None)
            assert entry.config is not None  # resolve raises for a model without a config
            return route_metadata(name, rc.strategy, models, entry.config)
        entry, _ = await self.catalog.resolve(name, version)
        assert entry.config is not None
        ready = sorted(v for v, s in entry.versions.items() if s.state == "ready")
        return model_metadata(entry.config, ready)

    async def model_ready(self, name: str, version: str | None) -> None:
        """Raise (naming why) unless the model, or every model of the route, is ready."""
        if name in self.pipeline.routes:
            for model in await self._route_models(name, version):
                await self.catalog.resolve(model, None)
            return
        await self.catalog.resolve(name, version)

    async def _route_models(self, name: str, version: str | None) -> list[str]:
        _no_route_version(name, version)
        rc = self.pipeline.routes[name]
        return [m for m in (rc.cheap, rc.expensive) if m]

    async def repository_index(self) -> list[dict[str, Any]]:
        await self.catalog.refresh()
        unloaded = self._control.unloaded()
        rows: list[dict[str, Any]] = []
        for name, entry in sorted(self.catalog.snapshot().items()):
            for v in sorted(entry.versions, key=version_order):
                st = entry.versions[v]
                row: dict[str, Any] = {"name": name, "version": v, "state": st.state.upper()}
                if st.reason:
                    row.update(reason=st.reason, file=st.file, field=st.field)
                rows.append(row)
            if entry.problem is not None:
                rows.append({"name": name, "version": "", "state": "UNAVAILABLE",
                             "reason": entry.problem.reason, "file": entry.problem.file,
                             "field": entry.problem.field})
        rows += [{"name": n, "version": "", "state": "UNLOADED"} for n in sorted(unloaded)]
        return rows

    async def _wait_for(self, predicate, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for pool in self._pools.values():
                await pool.sync()
            await self.catalog.refresh()
            if predicate(self.catalog.snapshot()):
                return
            await asyncio.sleep(0.2)
        raise ServiceUnavailable(f"{what} did not complete within {timeout_s:.0f}s")

    async def load_model(self, name: str) -> dict[str, Any]:
        repo = ModelRepository(self.settings.repository, trust=self.settings.trust)
        entry = (await asyncio.to_thread(repo.scan)).entry(name)
        if entry is None:
            raise ModelNotFound(f"name: no model {name!r} in the repository", field="name")
        if entry.error:
            raise InvalidRequest(f"name: {name!r} cannot load: {entry.error}", field="name")
        self._control.set_unloaded(name, False)
        await self._wait_for(lambda idx: name in idx and (idx[name].ready or all(
            s.state in PROBLEM_STATES for s in idx[name].versions.values())),
            f"load of {name!r}")
        got = self.catalog.snapshot()[name]
        if not got.ready:
            reasons = "; ".join(f"{v}: {s.reason}" for v, s in got.versions.items())
            raise InvalidRequest(f"name: {name!r} failed to load ({reasons})", field="name")
        return {"name": name, "state": "READY", "default_version": got.default_version}

    async def unload_model(self, name: str) -> dict[str, Any]:
        if name not in self.catalog.snapshot():
            await self.catalog.refresh()
        if name not in self.catalog.snapshot() and name not in self._control.unloaded():
            raise ModelNotFound(f"name: no loaded model {name!r}", field="name")
        self._control.set_unloaded(name, True)
        await self._wait_for(lambda idx: name not in idx, f"unload of {name!r}")
        return {"name": name, "state": "UNLOADED"}


    def _accept(self, request: Any) -> InferenceRequest:
        """Type, route-version and caller-identity checks every entry point shares."""
        if not isinstance(request, InferenceRequest):
            raise InvalidRequest(
                f"request: expected router.schemas.InferenceRequest, got "
                f"{type(request).__name__}", field="request")
        if request.model in self.pipeline.routes:
            _no_route_version(request.model, request.version)
        request = identify(request, self._caller_keys)
        # The deadline runs from arrival (#14): the HTTP edge stamps it; a handle call arrives
        # here. A stamp from the caller's side is never later than now (no deadline stretching).
        now = time.monotonic()
        if request.arrival_s is None or request.arrival_s > now:
            request.arrival_s = now
        return request


def _internal(e: BaseException) -> TimeshareError:
    """An unexpected failure of one request of an ``infer_many`` call: logged here with its
    traceback, answered to its caller alone as a ``ServiceUnavailable`` naming its type."""
    log.error("infer_many: one request failed unexpectedly", exc_info=e)
    return ServiceUnavailable(f"internal error: {type(e).__name__}: {e}")


def _no_route_version(route: str, version: str | None) -> None:
    if version is not None:
        raise InvalidRequest(f"version: {route!r} is a route (a virtual model) and has no "
                             f"versions; got {version!r}", field="version")
