"""Disk loads off the device loop: which models are loading, and how much of each is left.

A model the host tier dropped is loaded from disk on its own task while the device keeps
serving resident models (``DeviceWorker.execute``). The scheduling policy sees such a model
``loading``, with the rest of its load (the measured load time less the time it has run) as its
swap-in cost, so a request that cannot wait out the load is refused at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pool._private.residency import Residency

__all__ = ["BackgroundLoads"]


class BackgroundLoads:
    """One load task per model at most; ``on_done(name, error)`` runs after each ends (the
    model is no longer listed by then), ``error`` None when it loaded."""

    def __init__(self, tiers: Residency, clock: Callable[[], float],
                 on_done: Callable[[str, BaseException | None], None]) -> None:
        self._tiers = tiers
        self._clock = clock
        self._on_done = on_done
        self._tasks: dict[str, tuple[asyncio.Task, float]] = {}  # name -> (task, started)

    def __contains__(self, name: str) -> bool:
        # Listed from the moment the task is created, before it first runs.
        return name in self._tasks

    def start(self, name: str) -> None:
        if name not in self._tasks:
            task = asyncio.get_running_loop().create_task(self._load(name))
            self._tasks[name] = (task, self._clock())

    def swap_cost_s(self, name: str) -> float:
        """Estimated time to make ``name`` resident: for a model loading here, what is left."""
        cost = self._tiers.swap_cost_s(name)
        if name not in self._tasks:
            return cost
        return max(0.0, cost - (self._clock() - self._tasks[name][1]))

    def cancel(self) -> None:
        for task, _ in list(self._tasks.values()):
            task.cancel()

    async def _load(self, name: str) -> None:
        error: BaseException | None = None
        try:
            await self._tiers.prefetch(name)
        except Exception as e:  # noqa: BLE001 - contained: that model's requests fail, not the loop
            error = e
        finally:
            self._tasks.pop(name, None)  # before on_done: the loop must see it loaded
        self._on_done(name, error)
