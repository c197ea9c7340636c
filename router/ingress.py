"""The ingress deployment: HTTP (v2) and handle methods over one Pipeline.

A thin adapter: it owns the Pipeline, a ModelCatalog refreshed from the CPU pool, and a
dispatcher over the pool handles; everything else lives in Ray-free modules.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from pool.control import ControlFile
from pool.repository import version_order
from pool.wire import PoolReply, work_request
from router.catalog import ModelCatalog
from router.errors import InvalidRequest, ModelNotFound, ServiceUnavailable
from router.http import build_http_app
from router.pipeline import Pipeline, PipelineConfig
from router.schemas import InferenceRequest, InferenceResponse
from router.settings import AppSettings

__all__ = ["Ingress", "RayDispatcher"]

log = logging.getLogger("ray.serve")


class RayDispatcher:
    """Dispatch to pool deployments through their handles."""

    def __init__(self, handles: dict[str, DeploymentHandle]) -> None:
        self._handles = handles
        self.pools = tuple(handles)

    async def dispatch(self, pool, model, version, inputs, *, priority, timeout_s) -> PoolReply:
        return await self._handles[pool].infer.remote(
            work_request(model, version, inputs, priority, timeout_s)
        )


@serve.deployment(name="Ingress", max_ongoing_requests=512)
@serve.ingress()
class Ingress:
    async def __init__(self, settings: dict[str, Any], pools: dict[str, DeploymentHandle]) -> None:
        self.settings = AppSettings.model_validate(settings)
        self.api_key = self.settings.resolved_api_key()
        self.max_body_bytes = self.settings.max_body_bytes
        self._pools = pools
        self._control = ControlFile(self.settings.resolved_state_dir())
        self.catalog = ModelCatalog(self._fetch_index)
        self.pipeline = Pipeline(
            self.catalog,
            RayDispatcher(pools),
            config=PipelineConfig(
                default_deadline_ms=self.settings.default_deadline_ms,
                fallback_margin_ms=self.settings.fallback_margin_ms,
            ),
        )
        self._app = build_http_app(self)
        self._refresher: asyncio.Task | None = None
        self._ensure_refresher()

    def __serve_build_asgi_app__(self):
        """Serve asks for the ASGI app after __init__; it is built over this instance."""
        return self._app

    def _ensure_refresher(self) -> None:
        if self._refresher is None or self._refresher.done():
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_loop())

    async def _fetch_index(self):
        return await self._pools["cpu"].index.remote()

    async def _refresh_loop(self) -> None:
        while True:
            try:
                await self.catalog.refresh()
            except Exception as e:  # pools restarting: keep the last index
                log.warning("catalog refresh failed: %s", e)
            await asyncio.sleep(self.settings.poll_interval_s)

    # -- handle API -----------------------------------------------------------------------
    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one inference. Raises typed ``router.errors`` exceptions on bad input."""
        self._ensure_refresher()
        if not isinstance(request, InferenceRequest):
            raise InvalidRequest(
                f"request: expected router.schemas.InferenceRequest, got {type(request).__name__}",
                field="request",
            )
        return await self.pipeline.infer(request)

    async def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pools": {}}
        for name, handle in self._pools.items():
            try:
                out["pools"][name] = await handle.status.remote()
            except Exception as e:
                out["pools"][name] = {"error": f"{type(e).__name__}: {e}"}
        return out

    # -- Frontend (HTTP) --------------------------------------------------------------------
    def live_models(self):
        return self.catalog.snapshot()

    async def model_entry(self, name: str, version: str | None):
        return await self.catalog.resolve(name, version)

    async def repository_index(self) -> list[dict[str, Any]]:
        await self.catalog.refresh()
        unloaded = self._control.unloaded()
        rows: list[dict[str, Any]] = []
        for name, entry in sorted(self.catalog.snapshot().items()):
            for v in sorted(entry.versions, key=version_order):
                s = entry.versions[v]
                row = {"name": name, "version": v, "state": s.state.upper()}
                if s.reason:
                    row["reason"] = s.reason
                rows.append(row)
            if entry.error:
                rows.append({"name": name, "version": "", "state": "UNAVAILABLE",
                             "reason": entry.error})
        rows += [{"name": n, "version": "", "state": "UNLOADED"} for n in sorted(unloaded)]
        return rows

    async def _wait_for(self, predicate, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for handle in self._pools.values():
                await handle.sync_now.remote()
            await self.catalog.refresh()
            if predicate(self.catalog.snapshot()):
                return
            await asyncio.sleep(0.2)
        raise ServiceUnavailable(f"{what} did not complete within {timeout_s:.0f}s")

    async def load_model(self, name: str) -> dict[str, Any]:
        from pool.repository import ModelRepository

        repo = ModelRepository(self.settings.repository)
        entry = (await asyncio.to_thread(repo.scan)).entry(name)
        if entry is None:
            raise ModelNotFound(f"name: no model {name!r} in the repository", field="name")
        if entry.error:
            raise InvalidRequest(f"name: {name!r} cannot load: {entry.error}", field="name")
        self._control.set_unloaded(name, False)
        await self._wait_for(lambda idx: name in idx and (idx[name].ready or all(
            s.state == "failed" for s in idx[name].versions.values())), f"load of {name!r}")
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
