"""The HTTP target (``target: {url: ...}``): v2 infer calls over the generator's raw HTTP/1.1
keep-alive client (``deploy.loadtest._private.http``)."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from deploy.loadtest._private.http import BodyEncoder, HttpLane, outcome_of, split_url
from deploy.loadtest.target import LoadRequest, Outcome

__all__ = ["HttpTarget"]


class HttpTarget:
    """POST ``{url}/v2/models/{model}[/versions/{v}]/infer`` over at most ``max_connections``
    keep-alive connections (the generator's raw HTTP/1.1 client, opened on first use).

    For one-off and closed-loop use; ``timeout_s`` bounds each call from its actual send. A
    call waiting for a free connection waits in FIFO order.
    """

    def __init__(self, url: str, *, timeout_s: float = 30.0, max_connections: int = 256) -> None:
        self._host, self._port, base = split_url(url)
        self._enc = BodyEncoder(self._host, self._port, base)
        self._timeout = timeout_s
        self._max = max_connections
        self._lanes: list[Any] = []
        self._idle: list[Any] = []
        self._waiters: deque[asyncio.Future[Any]] = deque()

    async def _acquire(self) -> Any:
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
