"""ModelHost: keeps a device worker in step with the model repository.

Owns the versions that are live on one worker: loads new version folders (warm-up included)
while serving, makes the newest ready version the default, leaves the previous version serving
when a new one fails, and honours explicit load/unload requests. Ray-free; the pool deployment
owns one and calls ``sync()`` periodically.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.errors import ModelLoadError, ModelNotLoaded
from pool.loader import load_module
from pool.repository import ModelRepository, RepositorySnapshot, version_order
from pool.types import ModelKey
from pool.work import PoolReply, PoolWork

__all__ = ["VersionState", "ModelIndexEntry", "ModelHost", "HostEvent"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class VersionState:
    state: str  # "loading" | "ready" | "failed"
    reason: str | None = None
    signature: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ModelIndexEntry:
    """What the router needs to know about one model (a snapshot)."""

    name: str
    config: ModelConfig | None
    default_version: str | None
    versions: dict[str, VersionState]
    error: str | None = None

    @property
    def ready(self) -> bool:
        return self.default_version is not None


@dataclass(frozen=True, slots=True)
class HostEvent:
    kind: str  # "version_ready" | "version_failed" | "config_invalid" | "unloaded"
    model: str
    version: str | None
    detail: str


class ModelHost:
    """Loads and serves the repository's models on one DeviceWorker."""

    def __init__(
        self,
        repository: ModelRepository,
        worker: DeviceWorker,
        *,
        device_filter: Callable[[ModelConfig], bool] = lambda c: True,
        on_event: Callable[[HostEvent], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.repository = repository
        self.worker = worker
        self._accepts = device_filter
        self._on_event = on_event or (lambda e: None)
        self._clock = clock
        self._states: dict[str, dict[str, VersionState]] = {}
        self._configs: dict[str, ModelConfig] = {}
        self._config_errors: dict[str, str] = {}
        self._unloaded: frozenset[str] = frozenset()
        self._index: dict[str, ModelIndexEntry] = {}
        self._sync_lock = asyncio.Lock()

    # -- control ---------------------------------------------------------------------------
    def set_unloaded(self, names: frozenset[str]) -> None:
        """Models explicitly unloaded through the repository API (not served until loaded)."""
        self._unloaded = frozenset(names)

    async def sync(self) -> None:
        """Bring the worker in line with the repository: one pass, never raises."""
        async with self._sync_lock:
            try:
                snapshot = await asyncio.to_thread(self.repository.scan)
            except Exception as e:  # repository unreadable: keep serving what is loaded
                log.error("repository scan failed: %s", e)
                return
            await self._apply(snapshot)
            self._rebuild_index()

    async def _apply(self, snap: RepositorySnapshot) -> None:
        self._config_errors = {n: e.error for n, e in snap.models.items() if e.error}
        for name, err in self._config_errors.items():
            if name not in self._configs:
                self._emit(HostEvent("config_invalid", name, None, err))
        wanted: dict[str, dict[str, tuple]] = {}
        for name, entry in snap.models.items():
            if entry.config is None or name in self._unloaded or not self._accepts(entry.config):
                continue
            # A changed config applies to versions loaded from now on; live ones keep theirs.
            self._configs[name] = entry.config
            wanted[name] = {v.version: (v.path, v.signature) for v in entry.versions}
        # Unload what vanished or was unloaded.
        for name in list(self._states):
            for version in list(self._states[name]):
                if version not in wanted.get(name, {}):
                    await self.worker.remove_model(ModelKey(name, version))
                    del self._states[name][version]
            if not self._states[name]:
                del self._states[name]
        # Load what is new or changed, oldest first so the newest ends up default.
        for name, versions in wanted.items():
            for version in sorted(versions, key=version_order):
                path, sig = versions[version]
                cur = self._states.get(name, {}).get(version)
                if cur is not None and cur.signature == sig:
                    continue  # loaded, or failed with these very bytes
                await self._load(name, version, path, sig)

    async def _load(self, name: str, version: str, path, sig) -> None:
        config = self._configs[name]
        key = ModelKey(name, version)
        states = self._states.setdefault(name, {})
        states[version] = VersionState("loading", None, sig)
        if self.worker.has_model(key):
            await self.worker.remove_model(key)
        try:
            await self.worker.add_model(
                key, config, partial(load_module, path, config, trust=self.repository.trust))
        except ModelLoadError as e:
            states[version] = VersionState("failed", str(e), sig)
            self._emit(HostEvent("version_failed", name, version, str(e)))
            return
        states[version] = VersionState("ready", None, sig)
        self._emit(HostEvent("version_ready", name, version, str(path)))

    def _rebuild_index(self) -> None:
        index: dict[str, ModelIndexEntry] = {}
        for name, states in self._states.items():
            ready = [v for v, s in states.items() if s.state == "ready"]
            default = max(ready, key=version_order) if ready else None
            index[name] = ModelIndexEntry(name, self._configs.get(name), default, dict(states))
        for name, err in self._config_errors.items():
            prev = index.get(name)
            index[name] = ModelIndexEntry(
                name, prev.config if prev else None, prev.default_version if prev else None,
                prev.versions if prev else {}, err,
            )
        self._index = index  # rebuilt whole, then assigned

    def _emit(self, event: HostEvent) -> None:
        failed = "fail" in event.kind or "invalid" in event.kind
        log.log(logging.WARNING if failed else logging.INFO,
                "%s %s@%s: %s", event.kind, event.model, event.version, event.detail)
        try:
            self._on_event(event)
        except Exception:  # a failing listener never stops loading
            log.exception("host event listener failed")

    # -- serving ---------------------------------------------------------------------------
    def index(self) -> dict[str, ModelIndexEntry]:
        return self._index

    async def run(self, work: PoolWork, *, wall: Callable[[], float] = time.time) -> PoolReply:
        """Run ``work`` on the worker; raises ModelNotLoaded, RequestExpired, DeviceOutOfMemory,
        QueueFull (``pool.work.PoolRefusal`` turns those into values for a handle)."""
        entry = self._index.get(work.model)
        if entry is None or not entry.ready:
            raise ModelNotLoaded(f"model {work.model!r} is not loaded here")
        version = work.version or entry.default_version
        assert version is not None
        state = entry.versions.get(version)
        if state is None or state.state != "ready":
            raise ModelNotLoaded(f"model {work.model!r} version {version!r} is not ready here")
        # The wall-clock deadline in this worker's clock (see PoolWork); the same wall reading
        # is the reply's received_at (no second clock read).
        received_at = wall()
        deadline = self._clock() + work.remaining_s(received_at)
        tensors = {k: np.ascontiguousarray(v) for k, v in work.inputs.items()}
        result = await self.worker.infer(
            ModelKey(work.model, version), tensors, priority=work.priority, deadline=deadline)
        return PoolReply(
            model=work.model, version=version,
            outputs={k: np.asarray(v) for k, v in result.outputs.items()},  # numpy in, out
            queue_ms=result.queue_ms, compute_ms=result.compute_ms, swap_ms=result.swap_ms,
            device=result.device, batch_size=result.batch_size, received_at=received_at)

    def status(self) -> dict:
        return {
            "device": self.worker.status(),
            "models": {
                name: {
                    "default_version": e.default_version,
                    "versions": {v: {"state": s.state, "reason": s.reason}
                                 for v, s in e.versions.items()},
                    **({"error": e.error} if e.error else {}),
                }
                for name, e in sorted(self._index.items())
            },
        }
