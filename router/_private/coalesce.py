"""Concurrent handle calls from one caller, sent as few Ray calls as the replica's pace allows.

A Serve handle call costs the caller and the replica about the same fixed amount whatever it
carries (the gRPC transport, the replica's request wrapper, pickling: about 400 us a side on a
2-core host, against a few us for a small model's forward). ``Coalescer`` amortises it the way
an HTTP/1.1 client pipelines on a warm connection, without a timer:

- while fewer than ``max_in_flight`` calls are out and nobody is waiting, a request goes out
  at once, alone (``send_one``): a caller on its own never waits for company;
- otherwise it waits, and when a call comes back, every waiting request (at most ``max_batch``,
  the most urgent class first) leaves together as one call (``send_many``).

So a request waits at most for one call in flight to return, and only when the caller already
has ``max_in_flight`` of them out. Each request still gets its own answer or its own error:
a batch is only a transport, and the replica runs every request of it as if it came alone.
Pure asyncio, no Ray: the client (``router.client``) supplies the two send functions.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Coalescer"]

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class Coalescer(Generic[Req, Resp]):
    """One event loop's queue of calls to one app (see the module's docstring).

    ``send_many`` returns one entry per request, in order: the answer, or the exception that
    request alone raised (it is raised to that request's caller only). An exception raised by
    ``send_many`` itself (the transport failed) reaches every caller of the batch.
    ``urgency(request)`` orders a batch over ``max_batch`` (lower first).
    """

    def __init__(self, send_one: Callable[[Req], Awaitable[Resp]],
                 send_many: Callable[[list[Req]], Awaitable[Sequence[Resp | BaseException]]],
                 *, max_in_flight: int, max_batch: int,
                 urgency: Callable[[Req], int] = lambda _: 0) -> None:
        if max_in_flight < 1 or max_batch < 1:
            raise ValueError(f"max_in_flight and max_batch must be >= 1, got {max_in_flight} "
                             f"and {max_batch}")
        self._send_one, self._send_many = send_one, send_many
        self.max_in_flight, self.max_batch = max_in_flight, max_batch
        self._urgency = urgency
        self._waiting: deque[tuple[Req, asyncio.Future[Resp]]] = deque()
        self._in_flight = 0
        self._tasks: set[asyncio.Task] = set()
        self.calls = self.requests = 0  # Ray calls made, and the requests they carried

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def call(self, request: Req) -> Resp:
        if self._in_flight < self.max_in_flight and not self._waiting:
            self._in_flight += 1
            self.calls += 1
            self.requests += 1
            try:
                return await self._send_one(request)
            finally:
                self._returned()
        fut: asyncio.Future[Resp] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, fut))
        return await fut

    def _returned(self) -> None:
        self._in_flight -= 1
        while self._waiting and self._in_flight < self.max_in_flight:
            batch = self._take()
            if batch:
                self._launch(batch)

    def _take(self) -> list[tuple[Req, asyncio.Future[Resp]]]:
        live = [(r, f) for r, f in self._waiting if not f.done()]  # a cancelled caller left
        self._waiting.clear()
        if len(live) > self.max_batch:
            live.sort(key=lambda rf: self._urgency(rf[0]))  # stable: arrival order within a class
            self._waiting.extend(live[self.max_batch:])
            live = live[:self.max_batch]
        return live

    def _launch(self, batch: list[tuple[Req, asyncio.Future[Resp]]]) -> None:
        self._in_flight += 1
        self.calls += 1
        self.requests += len(batch)
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[Req, asyncio.Future[Resp]]]) -> None:
        try:
            if len(batch) == 1:
                outcomes: Sequence[Resp | BaseException] = [await _outcome(
                    self._send_one(batch[0][0]))]
            else:
                outcomes = await self._send_many([r for r, _ in batch])
                if len(outcomes) != len(batch):
                    raise RuntimeError(f"send_many answered {len(outcomes)} of {len(batch)} "
                                       f"requests")
        except asyncio.CancelledError:  # the caller's loop is closing: so are its calls
            for _, fut in batch:
                fut.cancel()
            raise
        except Exception as e:  # the transport failed: every caller of the batch hears it
            outcomes = [e] * len(batch)
        finally:
            self._returned()
        for (_, fut), out in zip(batch, outcomes, strict=True):
            if fut.done():
                continue
            if isinstance(out, BaseException):
                fut.set_exception(out)
            else:
                fut.set_result(out)


async def _outcome(aw: Awaitable[Resp]) -> Resp | BaseException:
    try:
        return await aw
    except Exception as e:  # one request's own error: raised to its caller only
        return e
