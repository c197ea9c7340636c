"""What the load generator sends to: the ``Target`` protocol and its HTTP implementation.

A target turns one ``LoadRequest`` into one ``Outcome``. It never raises for a failed call: the
failure becomes ``Outcome.error`` with a class name (``http_503``, ``Timeout``...), so the
generator's accounting is the same whatever the transport. Latency is NOT measured here: the
generator measures from the planned send time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["CallableTarget", "HttpTarget", "LoadRequest", "Outcome", "Target", "v2_body"]


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """One planned request. ``inputs`` maps input name -> (wire datatype, array)."""

    request_id: str
    model: str
    inputs: dict[str, tuple[str, np.ndarray]]
    priority: str = "interactive"
    caller: str = "loadtest"
    deadline_ms: float | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came back. ``error`` is None on success, else a short class name."""

    error: str | None = None
    status: int | None = None
    degraded: bool = False
    served_by: str | None = None
    reason: str | None = None
    cache: str | None = None
    bytes_out: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class Target(Protocol):
    """Anything the generator can load: one async ``send`` per request; ``aclose`` at the end."""

    async def send(self, req: LoadRequest) -> Outcome:
        """Send one request and report what came back; never raises for a failed call."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def v2_params(req: LoadRequest) -> dict[str, Any]:
    """The ``parameters`` object of one request's v2 body."""
    params: dict[str, Any] = {"priority": req.priority, "caller": req.caller}
    if req.deadline_ms is not None:
        params["deadline_ms"] = req.deadline_ms
    return params


def v2_inputs(req: LoadRequest) -> list[dict[str, Any]]:
    """The ``inputs`` list of one request's v2 body."""
    return [
        {"name": name, "shape": list(arr.shape), "datatype": dt, "data": arr.ravel().tolist()}
        for name, (dt, arr) in req.inputs.items()
    ]


def v2_body(req: LoadRequest) -> dict[str, Any]:
    """KServe v2 / Open Inference Protocol JSON body of one request."""
    return {"id": req.request_id, "inputs": v2_inputs(req), "parameters": v2_params(req)}


class HttpTarget:
    """POST ``{url}/v2/models/{model}[/versions/{v}]/infer`` over at most ``max_connections``
    keep-alive connections (the generator's raw HTTP/1.1 client, opened on first use).

    For one-off and closed-loop use; ``timeout_s`` bounds each call from its actual send. A
    call waiting for a free connection waits in FIFO order.
    """

    def __init__(self, url: str, *, timeout_s: float = 30.0, max_connections: int = 256) -> None:
        from deploy.loadtest._private.http import BodyEncoder, split_url

        self._host, self._port, base = split_url(url)
        self._enc = BodyEncoder(self._host, self._port, base)
        self._timeout = timeout_s
        self._max = max_connections
        self._lanes: list[Any] = []
        self._idle: list[Any] = []
        self._waiters: deque[asyncio.Future[Any]] = deque()

    async def _acquire(self) -> Any:
        from deploy.loadtest._private.http import HttpLane

        if self._idle:
            return self._idle.pop()
        if len(self._lanes) < self._max:
            lane = HttpLane(self._host, self._port, self._on_finish)
            self._lanes.append(lane)
            return lane
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        return await fut

    def _release(self, lane: Any) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(lane)
                return
        self._idle.append(lane)

    @staticmethod
    def _on_finish(lane: Any, result: Any) -> None:
        fut = lane.tag
        if not fut.done():
            fut.set_result(result)

    async def send(self, req: LoadRequest) -> Outcome:
        """Send one request; HTTP errors and transport failures become ``Outcome.error``."""
        from deploy.loadtest._private.http import outcome_of

        lane = await self._acquire()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        lane.start(fut, self._enc.encode(req), 0.0)
        try:
            result = await asyncio.wait_for(fut, self._timeout)
        except asyncio.TimeoutError:
            lane.abort()
            result = Outcome(error="Timeout")
        self._release(lane)
        return outcome_of(result)

    async def aclose(self) -> None:
        for lane in self._lanes:
            lane.close()


class CallableTarget:
    """Adapts ``async def fn(req) -> Outcome`` (e.g. a Ray handle call) to ``Target``.

    Exceptions raised by ``fn`` become ``Outcome.error`` with the exception's type name.
    """

    def __init__(self, fn: Callable[[LoadRequest], Awaitable[Outcome]]) -> None:
        self._fn = fn

    async def send(self, req: LoadRequest) -> Outcome:
        try:
            return await self._fn(req)
        except Exception as e:  # noqa: BLE001 - a failed call is an outcome, never a crash
            return Outcome(error=type(e).__name__)

    async def aclose(self) -> None:
        return None
