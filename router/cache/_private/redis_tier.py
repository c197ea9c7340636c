"""Redis exact tier: raw encoded answers under canonical keys, TTL via ``SET EX``.

Every command is bounded by a short timeout (socket timeouts, no client retries, and an
``asyncio.timeout`` around the call). Any error or timeout marks the tier down: callers get
``BYPASS`` without touching Redis until a probe succeeds again (see ``Availability``).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from router.cache._private.availability import Availability, EventSink
from router.cache.types import CacheSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

_HAS_TIMEOUT = hasattr(asyncio, "timeout")  # 3.11+


class _Bypass:
    __slots__ = ()

    def __repr__(self) -> str:
        return "BYPASS"


BYPASS = _Bypass()
"""Returned instead of a result when the tier is unavailable."""


class RedisTier:
    """Bytes get/set against one Redis server with fail-soft availability."""

    def __init__(
        self,
        settings: CacheSettings,
        *,
        clock: Callable[[], float],
        on_event: EventSink | None,
    ) -> None:
        assert settings.redis_url is not None
        self._timeout = settings.redis_timeout_s
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.redis_url,
            max_connections=settings.redis_max_connections,
            timeout=settings.redis_timeout_s,
            socket_timeout=settings.redis_timeout_s,
            socket_connect_timeout=settings.redis_timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        self._client = aioredis.Redis(connection_pool=pool)
        self.availability = Availability(
            name="redis_cache",
            backoff_s=settings.redis_backoff_s,
            backoff_max_s=settings.redis_backoff_max_s,
            clock=clock,
            on_event=on_event,
        )

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T | _Bypass:
        if not self.availability.admit():
            return BYPASS
        try:
            if not self.availability.up:  # admitted while down: this call is the probe
                # Idle pooled connections may still be attached to the server that went away
                # (a restarted Redis closes them only on first use): the probe and every call
                # after it use connections opened after the outage, so a restart is one outage
                # and one recovery, not a recovery followed by a failure per stale connection.
                await self._client.connection_pool.disconnect(inuse_connections=False)
            if _HAS_TIMEOUT:
                async with asyncio.timeout(self._timeout):
                    result = await op()
            else:  # Python 3.10: wait_for costs a task per call, still bounded
                result = await asyncio.wait_for(op(), self._timeout)
        except (aioredis.RedisError, OSError, TimeoutError) as e:
            self.availability.failed(e)
            return BYPASS
        self.availability.succeeded()
        return result

    async def get(self, key: str) -> bytes | None | _Bypass:
        """The payload under ``key``, None when absent, ``BYPASS`` when unavailable."""
        return await self._call(lambda: cast("Awaitable[bytes | None]", self._client.get(key)))

    async def set(self, key: str, payload: bytes, ttl_s: float) -> bool:
        """Store ``payload`` for ``ttl_s`` (rounded up to whole seconds). False if bypassed."""
        ex = max(1, math.ceil(ttl_s))
        return await self._call(lambda: self._client.set(key, payload, ex=ex)) is not BYPASS

    async def close(self) -> None:
        """Close the client and its connection pool."""
        try:
            await self._client.aclose()
            await self._client.connection_pool.disconnect()
        except Exception:
            log.debug("error closing redis client", exc_info=True)
