"""ModelHost: keeps a device worker in step with the model repository.

Owns the versions that are live on one worker: loads new version folders (warm-up included)
while serving, makes the newest ready version the default, leaves the previous version serving
when a new one fails, and honours explicit load/unload requests. Ray-free; the pool deployment
owns one and calls ``sync()`` periodically.

It also owns why a model or version is not serving: a config or version that failed
(``failed``) or that the trust boundary refused (``refused``) keeps its reason, file and field
in the index (and so in ``/v2/status``, ``timeshare status``, ``/ui`` and the
model-load-failure alert). Each such problem is logged once, as one WARNING line, when it
first appears or its reason changes, not on every repository poll.
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
from pool.loader import WEIGHT_FILES, load_module, shown_path
from pool.repository import ModelRepository, RepositorySnapshot, version_order
from pool.types import ModelKey
from pool.work import PoolReply, PoolWork

__all__ = ["PROBLEM_STATES", "VersionState", "ModelIndexEntry", "ModelHost", "HostEvent"]

log = logging.getLogger(__name__)


PROBLEM_STATES = ("failed", "refused")  # a version or config that is not serving, and why


@dataclass(frozen=True, slots=True)
class VersionState:
    """A version's state, or (as :attr:`ModelIndexEntry.problem`) its model config's problem.

    ``failed``: tried and did not work (bad config, corrupt file, failed warm-up);
    ``refused``: the trust boundary refused it before anything of it ran.
    """

    state: str  # "loading" | "ready" | "failed" | "refused"
    reason: str | None = None  # the whole message: "<file> [<field>]: <why>"
    signature: tuple[int, int] | None = None
    file: str | None = None  # the file at fault, relative to the repository
    field: str | None = None  # the config field at fault, when one is

    @classmethod
    def of(cls, e: ModelLoadError, signature: tuple[int, int] | None = None) -> VersionState:
        """The ``failed`` or ``refused`` state a load error leaves."""
        return cls(e.state, str(e), signature, e.path, e.field)

    def view(self) -> dict:
        """The plain form ``status()`` shows."""
        return {"state": self.state, "reason": self.reason, "file": self.file,
                "field": self.field}


@dataclass(frozen=True, slots=True)
class ModelIndexEntry:
    """What the router needs to know about one model (a snapshot)."""

    name: str
    config: ModelConfig | None
    default_version: str | None
    versions: dict[str, VersionState]
    problem: VersionState | None = None  # the config's: failed or refused (live versions serve)

    @property
    def ready(self) -> bool:
        return self.default_version is not None

    @property
    def error(self) -> str | None:
        """The config problem's reason (None when the config is fine)."""
        return self.problem.reason if self.problem else None

    @property
    def state(self) -> str:
        """``ready`` (a version serves), else the config's problem, else ``loading``,
        ``refused`` or ``failed`` from its versions, else ``empty`` (no version folder)."""
        if self.ready:
            return "ready"
        if self.problem is not None:
            return self.problem.state
        states = {s.state for s in self.versions.values()}
        for state in ("loading", "refused", "failed"):
            if state in states:
                return state
        return "empty"

    def problems(self) -> list[tuple[str | None, VersionState]]:
        """(version or None for the config, state) of everything that failed or was refused."""
        out: list[tuple[str | None, VersionState]] = [(None, self.problem)] if self.problem else []
        out += [(v, self.versions[v]) for v in sorted(self.versions, key=version_order)
                if self.versions[v].state in PROBLEM_STATES]
        return out


@dataclass(frozen=True, slots=True)
class HostEvent:
    kind: str  # "version_ready" | "failed" | "refused" | "resolved"
    model: str
    version: str | None  # None: the model's config
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
        # name -> version -> the worker's key for it: built once per load, not per request
        self._keys: dict[str, dict[str, ModelKey]] = {}
        self._configs: dict[str, ModelConfig] = {}
        self._config_errors: dict[str, VersionState] = {}
        # What was logged per (model, version or None): a problem is logged once, not per poll.
        self._reported: dict[tuple[str, str | None], tuple[str, str | None]] = {}
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
        self._config_errors = {n: VersionState.of(e.problem) for n, e in snap.models.items()
                               if e.problem is not None}
        wanted: dict[str, dict[str, tuple]] = {}
        for name, entry in snap.models.items():
            if entry.config is None and name in self._states and name not in self._unloaded:
                # A config that fails now leaves the versions loaded under the last good one
                # serving as they are (nothing new loads until the config is fixed).
                wanted[name] = {v: (None, st.signature) for v, st in self._states[name].items()}
                continue
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
                    self._keys.get(name, {}).pop(version, None)
            if not self._states[name]:
                del self._states[name]
                self._keys.pop(name, None)
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
        key = self._keys.setdefault(name, {}).setdefault(version, ModelKey(name, version))
        states = self._states.setdefault(name, {})
        states[version] = VersionState("loading", None, sig)
        if self.worker.has_model(key):
            await self.worker.remove_model(key)
        try:
            await self.worker.add_model(
                key, config, partial(load_module, path, config, trust=self.repository.trust),
                source=shown_path(path / WEIGHT_FILES[config.format]))
        except ModelLoadError as e:
            states[version] = VersionState.of(e, sig)
            return
        states[version] = VersionState("ready", None, sig)
        self._emit(HostEvent("version_ready", name, version, str(path)))

    def _rebuild_index(self) -> None:
        index: dict[str, ModelIndexEntry] = {}
        for name, states in self._states.items():
            ready = [v for v, s in states.items() if s.state == "ready"]
            default = max(ready, key=version_order) if ready else None
            index[name] = ModelIndexEntry(name, self._configs.get(name), default, dict(states))
        for name, problem in self._config_errors.items():
            prev = index.get(name)
            index[name] = ModelIndexEntry(
                name, prev.config if prev else None, prev.default_version if prev else None,
                prev.versions if prev else {}, problem,
            )
        self._index = index  # rebuilt whole, then assigned
        self._report(index)

    def _report(self, index: dict[str, ModelIndexEntry]) -> None:
        """One WARNING line per new or changed problem; an INFO line when one goes away."""
        now = {(name, version): (st.state, st.reason)
               for name, entry in index.items() for version, st in entry.problems()}
        for (name, version), (state, reason) in now.items():
            if self._reported.get((name, version)) != (state, reason):
                self._emit(HostEvent(state, name, version, reason or ""))
        for name, version in self._reported.keys() - now.keys():
            self._emit(HostEvent("resolved", name, version, "no longer failed or refused"))
        self._reported = now

    def _emit(self, event: HostEvent) -> None:
        what = f"model {event.model}" + (f" version {event.version}" if event.version
                                         else " config")
        level = logging.WARNING if event.kind in PROBLEM_STATES else logging.INFO
        log.log(level, "%s %s: %s", what, event.kind, event.detail)
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
        keys = self._keys.get(work.model)
        key = keys.get(version) if keys is not None else None
        if key is None:  # unloaded since the index was read: the worker says it is not loaded
            key = ModelKey(work.model, version)
        result = await self.worker.infer(
            key, tensors, priority=work.priority, deadline=deadline)
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
                    "state": e.state,
                    "versions": {v: s.view() for v, s in e.versions.items()},
                    **({"problem": e.problem.view(), "error": e.problem.reason}
                       if e.problem else {}),
                }
                for name, e in sorted(self._index.items())
            },
        }
