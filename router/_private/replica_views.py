"""Every ingress replica's own view (its breakers, cache and quota-store state), for /v2/status.

Breakers stay per replica (client-side, as in resilience4j and Envoy), so one replica's status
alone shows whichever replica answered. Each replica publishes its view to the shared Redis
every refresh (``SET ... EX ttl_s``: a replica that is gone drops out within ``ttl_s``) and
status reads all of them back, named by replica. Without Redis, or while it is down, status
shows the answering replica's view only and says so (``complete: false``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["ReplicaViews"]

log = logging.getLogger(__name__)


class ReplicaViews:
    """Publish this replica's view; collect every live replica's (bounded: ``max_replicas``)."""

    def __init__(self, redis_url: str | None, *, key_prefix: str, replica: str,
                 ttl_s: float = 10.0, timeout_s: float = 0.5, max_replicas: int = 256) -> None:
        self.replica = replica
        self._prefix, self._ttl, self._timeout = key_prefix, ttl_s, timeout_s
        self._max = max_replicas
        self._redis = None if redis_url is None else aioredis.Redis.from_url(
            redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0))

    async def publish(self, view: dict[str, Any]) -> None:
        """Best effort: a failure only leaves the last published view to expire."""
        if self._redis is None:
            return
        try:
            await asyncio.wait_for(self._redis.set(
                self._prefix + self.replica, json.dumps(view), ex=max(1, int(self._ttl))),
                self._timeout)
        except Exception as e:  # noqa: BLE001 - status is never worth an error
            log.debug("replica view not published: %s", e)

    async def collect(self, own: dict[str, Any]) -> dict[str, Any]:
        """``{"complete": bool, "replicas": {replica: view}}``; ``own`` is always in it."""
        views: dict[str, Any] = {}
        complete = False
        if self._redis is not None:
            try:
                views = await asyncio.wait_for(self._read_all(), self._timeout * 2)
                complete = True
            except Exception as e:  # noqa: BLE001
                log.warning("replica views unavailable: %s", e)
        views[self.replica] = own  # the freshest view of this replica is its own
        return {"complete": complete, "replicas": dict(sorted(views.items()))}

    async def _read_all(self) -> dict[str, Any]:
        assert self._redis is not None
        keys = []
        async for key in self._redis.scan_iter(match=self._prefix + "*", count=100):
            keys.append(key)
            if len(keys) >= self._max:
                break
        if not keys:
            return {}
        values = await self._redis.mget(keys)
        return {k.decode().removeprefix(self._prefix): json.loads(v)
                for k, v in zip(keys, values, strict=True) if v is not None}

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
