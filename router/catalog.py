"""The router's view of which models and versions are live (a snapshot from the pools)."""

from __future__ import annotations

import time
from typing import Awaitable, Callable

from pool.host import ModelIndexEntry
from pool.repository import version_order
from router.errors import ModelNotFound

__all__ = ["ModelCatalog"]


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
    ) -> None:
        self._fetch = fetch
        self._index: dict[str, ModelIndexEntry] = {}
        self._clock = clock
        self._last_refresh = float("-inf")
        self._min_miss = min_miss_refresh_s

    async def refresh(self) -> None:
        self._index = await self._fetch()
        self._last_refresh = self._clock()

    def snapshot(self) -> dict[str, ModelIndexEntry]:
        return self._index

    async def resolve(self, model: str, version: str | None) -> tuple[ModelIndexEntry, str]:
        """Return the entry and the concrete version, or raise ModelNotFound naming the field."""
        entry = self._index.get(model)
        stale = entry is None or (version is not None and version not in entry.versions)
        if stale and self._clock() - self._last_refresh >= self._min_miss:
            await self.refresh()
            entry = self._index.get(model)
        if entry is None or entry.config is None:
            known = ", ".join(sorted(n for n, e in self._index.items() if e.ready)) or "none"
            raise ModelNotFound(f"model: unknown model {model!r}; available: {known}", field="model")
        if version is None:
            if entry.default_version is None:
                raise ModelNotFound(
                    f"model: {model!r} has no ready version ({_states(entry)})", field="model"
                )
            return entry, entry.default_version
        state = entry.versions.get(version)
        if state is None or state.state != "ready":
            ready = sorted((v for v, s in entry.versions.items() if s.state == "ready"), key=version_order)
            why = f" ({state.state}: {state.reason})" if state else ""
            raise ModelNotFound(
                f"version: {model!r} has no ready version {version!r}{why}; ready: {ready}",
                field="version",
            )
        return entry, version


def _states(entry: ModelIndexEntry) -> str:
    return ", ".join(f"{v}={s.state}" for v, s in entry.versions.items()) or "no versions"
