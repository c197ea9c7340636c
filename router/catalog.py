"""The router's view of which models and versions are live (a snapshot from the pools).

Each model's fallback chain is compiled here, when its config arrives (model load), never on
the request path: a chain that does not compile (a bad rule, a callable outside the operator's
allowlist) marks that model failed with the reason, which status, the repository index and the
model-load-failure alert report.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from common.trust import ModuleAllowlist
from fallbacks import CompiledStep, compile_chain
from pool.config import ModelConfig
from pool.host import ModelIndexEntry, VersionState
from pool.repository import version_order
from router.errors import ModelNotFound

log = logging.getLogger(__name__)

__all__ = ["ModelCatalog", "config_of"]


class ModelCatalog:
    """Holds the latest model index; refreshed by an injected async fetcher.

    ``refresh_s`` bounds staleness: a lookup that misses refreshes at most once per
    ``min_miss_refresh_s`` so a flood of requests for unknown models cannot hammer the pools.
    """

    def __init__(
        self,
        fetch: Callable[[], Awaitable[dict[str, ModelIndexEntry]]],
        *,
        min_miss_refresh_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        allow: ModuleAllowlist = ModuleAllowlist(),
    ) -> None:
        self._fetch = fetch
        self._allow = allow
        self._index: dict[str, ModelIndexEntry] = {}
        self._chains: dict[str, tuple[ModelConfig, tuple[CompiledStep, ...] | str]] = {}
        self._clock = clock
        self._last_refresh = float("-inf")
        self._min_miss = min_miss_refresh_s

    async def refresh(self) -> None:
        fetched = await self._fetch()
        chains = {}
        index = {}
        for name, entry in fetched.items():
            if entry.config is None:
                index[name] = entry
                continue
            prev = self._chains.get(name)
            compiled = prev if prev is not None and prev[0] == entry.config else (
                entry.config, self._compile(entry.config))
            chains[name] = compiled
            index[name] = entry if not isinstance(compiled[1], str) else _failed(entry, compiled[1])
        self._chains, self._index = chains, index  # rebuilt whole, then assigned
        self._last_refresh = self._clock()

    def _compile(self, config: ModelConfig) -> tuple[CompiledStep, ...] | str:
        try:
            return compile_chain(config.fallback, where=f"{config.name}.fallback",
                                 allow=self._allow)
        except ValueError as e:  # RuleConfigError included: the reason, for status and alerts
            log.error("model %s: fallback chain refused: %s", config.name, e)
            return f"fallback chain: {e}"

    def chain(self, model: str) -> tuple[CompiledStep, ...]:
        """The compiled fallback chain of a ready model (compiled when its config arrived)."""
        compiled = self._chains.get(model)
        if compiled is None or isinstance(compiled[1], str):
            return ()
        return compiled[1]

    def snapshot(self) -> dict[str, ModelIndexEntry]:
        return self._index

    def failed_models(self) -> dict[str, str]:
        """Models with a failed or refused config or version, each with its reasons (the
        model-load-failure alert's summary)."""
        out: dict[str, str] = {}
        for name, entry in sorted(self._index.items()):
            seen: dict[str | None, str] = {}  # reason -> how it reads (once per reason)
            for v, st in entry.problems():
                seen.setdefault(st.reason, f"{st.state}: {st.reason}" if v is None else
                                f"version {v} {st.state}: {st.reason}")
            if seen:
                out[name] = "; ".join(seen.values())
        return out

    async def resolve(self, model: str, version: str | None) -> tuple[ModelIndexEntry, str]:
        """Return the entry and the concrete version, or raise ModelNotFound naming the field.

        The entry always has its config (see :func:`config_of`)."""
        entry = self._index.get(model)
        stale = entry is None or (version is not None and version not in entry.versions)
        if stale and self._clock() - self._last_refresh >= self._min_miss:
            await self.refresh()
            entry = self._index.get(model)
        if entry is not None and entry.problem is not None and not entry.ready:
            how = "was refused" if entry.problem.state == "refused" else "failed to load"
            raise ModelNotFound(f"model: {model!r} {how} ({entry.error})", field="model")
        if entry is None or entry.config is None:
            known = ", ".join(sorted(n for n, e in self._index.items() if e.ready)) or "none"
            raise ModelNotFound(f"model: unknown model {model!r}; available: {known}",
                                field="model")
        if version is None:
            if entry.default_version is None:
                raise ModelNotFound(
                    f"model: {model!r} has no ready version ({_states(entry)})", field="model"
                )
            return entry, entry.default_version
        state = entry.versions.get(version)
        if state is None or state.state != "ready":
            ready = sorted((v for v, s in entry.versions.items() if s.state == "ready"),
                           key=version_order)
            why = f" ({state.state}: {state.reason})" if state else ""
            raise ModelNotFound(
                f"version: {model!r} has no ready version {version!r}{why}; ready: {ready}",
                field="version",
            )
        return entry, version


def _failed(entry: ModelIndexEntry, reason: str) -> ModelIndexEntry:
    """``entry`` with every version failed for ``reason`` (nothing of it is served)."""
    file = f"{entry.name}/config.yaml"
    reason = f"{file} [fallback]: {reason}"
    versions = {v: VersionState("failed", reason, s.signature, file, "fallback")
                for v, s in entry.versions.items()}
    return replace(entry, default_version=None, versions=versions,
                   problem=VersionState("failed", reason, None, file, "fallback"))


def _states(entry: ModelIndexEntry) -> str:
    return ", ".join(f"{v}={s.state}" for v, s in entry.versions.items()) or "no versions"


def config_of(entry: ModelIndexEntry) -> ModelConfig:
    """The config of an entry that :meth:`ModelCatalog.resolve` returned (never None there)."""
    assert entry.config is not None, f"{entry.name}: resolve() returned an entry without config"
    return entry.config
