"""A real ``DeviceWorker`` that also keeps what each request handed it.

The contract tests read it to see, at the worker, what the request path delivered: the model
and version (the key), the priority class and the absolute deadline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.priority import Priority
from pool._private.worker import DeviceWorker
from pool.host import ModelHost
from pool.types import ModelKey, WorkResult
from pool.work import PoolReply, PoolWork

__all__ = ["Handed", "RecordingHost", "RecordingWorker"]


@dataclass(frozen=True, slots=True)
class Handed:
    """One ``infer`` call as the worker received it; ``at`` is the worker's clock then."""

    key: ModelKey
    priority: Priority
    deadline: float | None
    at: float
    rows: int


class RecordingWorker(DeviceWorker):
    """``DeviceWorker`` unchanged, plus ``handed``: the last 256 ``infer`` calls (bounded),
    and ``calls``: how many there were in all."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handed: deque[Handed] = deque(maxlen=256)
        self.calls = 0

    def since(self, calls: int) -> list[Handed]:
        """The calls after the first ``calls`` (at most the last 256)."""
        n = self.calls - calls
        return list(self.handed)[-n:] if n > 0 else []

    async def infer(self, key: ModelKey, inputs: Mapping[str, Any], *,
                    priority: Priority = Priority.INTERACTIVE,
                    deadline: float | None = None) -> WorkResult:
        rows = len(next(iter(inputs.values()))) if inputs else 0
        self.handed.append(Handed(key, priority, deadline, self._clock(), rows))
        self.calls += 1
        return await super().infer(key, inputs, priority=priority, deadline=deadline)


class RecordingHost(ModelHost):
    """``ModelHost`` unchanged, plus ``works``: the last 256 ``PoolWork`` it was asked to run
    (what crossed into the pool: caller and request id included), and ``runs`` in all."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.works: deque[PoolWork] = deque(maxlen=256)
        self.runs = 0

    def since(self, runs: int) -> list[PoolWork]:
        """The works after the first ``runs`` (at most the last 256)."""
        n = self.runs - runs
        return list(self.works)[-n:] if n > 0 else []

    async def run(self, work: PoolWork, **kwargs: Any) -> PoolReply:
        self.works.append(work)
        self.runs += 1
        return await super().run(work, **kwargs)
