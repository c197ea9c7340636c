"""Delivery machinery shared by every channel: bounded queue, retries with backoff, rate limit.

A :class:`Channel` accepts notifications with :meth:`Channel.enqueue` (synchronous, never
blocks, never raises on delivery problems) and delivers them from its own asyncio task.

Bounds (set per channel by :class:`alerting.config.DeliveryConfig`):
- queue: ``queue_size`` pending notifications; when full the oldest is dropped and counted;
- retries: at most ``max_attempts`` attempts on 5xx, 429 and transport errors, delays doubling
  from ``backoff_initial`` up to ``backoff_max`` (``Retry-After`` honoured, capped likewise);
  other 4xx never retry;
- rate: a token bucket of ``burst`` tokens refilled at ``rate_per_s``, one token per attempt.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx

from alerting.clock import Clock, SystemClock
from alerting.config import DeliveryConfig
from alerting.notification import Notification
from common.tasks import cancel_and_wait

__all__ = ["Channel", "ChannelStats", "DeliveryResult", "HttpRequest", "TokenBucket"]

log = logging.getLogger("alerting")

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One HTTP call a channel wants made."""

    url: str
    json: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """Outcome of delivering one notification on one channel."""

    channel: str
    kind: str
    receiver: str
    ok: bool
    attempts: int
    status_code: int | None = None
    error: str | None = None
    body: str = ""
    test: bool = False


@dataclass(slots=True)
class ChannelStats:
    """Counters of one channel (cumulative since start)."""

    delivered: int = 0
    failed: int = 0
    dropped: int = 0
    retries: int = 0
    consecutive_failures: int = 0
    last: DeliveryResult | None = None


class TokenBucket:
    """``burst`` tokens, refilled at ``rate`` per second on an injected monotonic clock."""

    def __init__(
        self, rate: float, burst: int, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate, self._burst, self._mono = rate, float(burst), monotonic
        self._tokens, self._last = float(burst), monotonic()

    def wait_time(self) -> float:
        """Take a token if one is there (returns 0), else the seconds until one will be."""
        now = self._mono()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self._rate


class _Retry(Exception):
    def __init__(
        self, message: str, status: int | None = None, delay: float | None = None, body: str = ""
    ):
        super().__init__(message)
        self.status, self.delay, self.body = status, delay, body


class _Fail(Exception):
    def __init__(self, message: str, status: int | None = None, body: str = ""):
        super().__init__(message)
        self.status, self.body = status, body


class Channel(abc.ABC):
    """Base class: subclasses say how a notification becomes an HTTP request (or a log line)."""

    kind: ClassVar[str]

    def __init__(
        self,
        name: str,
        receiver: str,
        delivery: DeliveryConfig,
        *,
        client: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
        sleep: Sleep = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        on_result: Callable[[DeliveryResult, Notification], None] | None = None,
        on_drop: Callable[[str], None] | None = None,
    ) -> None:
        self.name, self.receiver, self.delivery = name, receiver, delivery
        self.stats = ChannelStats()
        self._client = client
        self._clock = clock or SystemClock
        self._sleep = sleep
        self._bucket = TokenBucket(delivery.rate_per_s, delivery.burst, monotonic)
        self._queue: collections.deque[Notification] = collections.deque()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self._on_result = on_result
        self._on_drop = on_drop

    # -- subclass hooks -------------------------------------------------------------------
    @abc.abstractmethod
    def build_request(self, note: Notification) -> HttpRequest:
        """The HTTP request that delivers ``note``."""

    def check_body(self, body: Any) -> tuple[bool, bool]:
        """(ok, retryable) from a 2xx JSON body; IM robots report errors with HTTP 200."""
        return True, False

    # -- public API -----------------------------------------------------------------------
    def enqueue(self, note: Notification) -> None:
        """Queue ``note`` for delivery; returns at once. Drops (and counts) the oldest when full."""
        if len(self._queue) >= self.delivery.queue_size:
            old = self._queue.popleft()
            self.stats.dropped += 1
            if self._on_drop is not None:
                self._on_drop(self.name)
            log.warning("alert channel %s queue full: dropped %s", self.name, old.group_key)
        self._queue.append(note)
        self._idle.clear()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._worker(), name=f"alert-{self.name}"
            )

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty and nothing is in flight; False on timeout."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def close(self) -> None:
        """Stop the worker (pending notifications are abandoned and counted as dropped)."""
        await cancel_and_wait([self._task])
        self._task = None
        self.stats.dropped += len(self._queue)
        self._queue.clear()
        self._idle.set()

    # -- internals ------------------------------------------------------------------------
    async def _worker(self) -> None:
        while True:
            if not self._queue:
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            note = self._queue.popleft()
            try:
                result = await self._deliver(note)
            except Exception as e:  # a channel bug must not kill the worker
                log.exception("alert channel %s failed unexpectedly", self.name)
                result = DeliveryResult(
                    self.name, self.kind, self.receiver, False, 0, error=repr(e)
                )
            self._record(result, note)

    def _record(self, result: DeliveryResult, note: Notification) -> None:
        s = self.stats
        s.last = result
        if result.ok:
            s.delivered += 1
            s.consecutive_failures = 0
        else:
            s.failed += 1
            s.consecutive_failures += 1
            log.warning(
                "alert channel %s gave up on %s: %s", self.name, note.group_key, result.error
            )
        if self._on_result is not None:
            try:
                self._on_result(result, note)
            except Exception:
                log.exception("alert result callback failed")

    async def _deliver(self, note: Notification) -> DeliveryResult:
        d = self.delivery
        attempt = 0
        while True:
            attempt += 1
            await self._rate_wait()
            try:
                status, body = await self._send(note)
                return self._result(note, True, attempt, status, None, body)
            except _Fail as e:
                return self._result(note, False, attempt, e.status, str(e), e.body)
            except _Retry as e:
                if attempt >= d.max_attempts:
                    return self._result(
                        note,
                        False,
                        attempt,
                        e.status,
                        f"{e} (gave up after {attempt} attempts)",
                        e.body,
                    )
                self.stats.retries += 1
                backoff = min(d.backoff_max, d.backoff_initial * 2 ** (attempt - 1))
                await self._sleep(min(d.backoff_max, e.delay) if e.delay is not None else backoff)

    def _result(
        self,
        note: Notification,
        ok: bool,
        attempts: int,
        status: int | None,
        error: str | None,
        body: str,
    ) -> DeliveryResult:
        return DeliveryResult(
            self.name, self.kind, self.receiver, ok, attempts, status, error, body[:500], note.test
        )

    async def _rate_wait(self) -> None:
        while (wait := self._bucket.wait_time()) > 0:
            await self._sleep(wait)

    async def _send(self, note: Notification) -> tuple[int | None, str]:
        """One attempt. Returns (status, body) on success; raises _Retry or _Fail."""
        if self._client is None:
            raise _Fail("no HTTP client configured")
        req = self.build_request(note)
        try:
            resp = await self._client.post(
                req.url, json=req.json, headers=req.headers, timeout=self.delivery.timeout_s
            )
        except httpx.TransportError as e:
            raise _Retry(f"{type(e).__name__}: {e}") from None
        body = resp.text
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Retry(f"HTTP {resp.status_code}", resp.status_code, _retry_after(resp), body)
        if not 200 <= resp.status_code < 300:
            raise _Fail(f"HTTP {resp.status_code}", resp.status_code, body)
        try:
            parsed = resp.json()
        except ValueError:
            parsed = None
        ok, retryable = self.check_body(parsed)
        if not ok:
            exc = _Retry if retryable else _Fail
            raise exc(f"rejected: {body[:200]}", resp.status_code, body=body)
        return resp.status_code, body


def _retry_after(resp: httpx.Response) -> float | None:
    value = resp.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
