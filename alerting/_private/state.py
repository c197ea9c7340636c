"""Where the alerter keeps what it has notified, so a restart does not re-page.

Redis layout (``prefix`` defaults to ``timeshare:alerting``):
- ``{prefix}:nflog:{sha}``: JSON ``{"group_key", "receiver", "at", "firing", "resolved"}``, with
  a TTL of ``retention`` seconds (one key per group and receiver, so entries expire one by one);
- ``{prefix}:acks``: set of acknowledged fingerprints, same TTL.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping

import redis.asyncio as aioredis

from alerting._private.nflog import NflogEntry

log = logging.getLogger("alerting")

Key = tuple[str, str]


class MemoryStore:
    """Keeps nothing beyond the process (the in-memory log already holds the state)."""

    kind = "memory"

    async def load(self) -> tuple[dict[Key, NflogEntry], set[str]]:
        return {}, set()

    async def save(self, entries: Mapping[Key, NflogEntry], acks: set[str] | None) -> None:
        return None

    async def close(self) -> None:
        return None


class RedisStore:
    """Notification log in Redis. Raises redis/OS errors to the caller, which decides to fall
    back."""

    kind = "redis"

    def __init__(self, url: str, *, prefix: str, retention: float, timeout_s: float = 1.0) -> None:
        self._r = aioredis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
        self._prefix, self._ttl = prefix, max(1, int(retention))

    def _key(self, key: Key) -> str:
        digest = hashlib.sha256(f"{key[0]}\x00{key[1]}".encode()).hexdigest()[:32]
        return f"{self._prefix}:nflog:{digest}"

    async def load(self) -> tuple[dict[Key, NflogEntry], set[str]]:
        entries: dict[Key, NflogEntry] = {}
        keys = [k async for k in self._r.scan_iter(match=f"{self._prefix}:nflog:*", count=500)]
        for raw in (await self._r.mget(keys)) if keys else []:
            if raw is None:
                continue  # expired between SCAN and MGET
            try:
                d = json.loads(raw)
                entries[(d["group_key"], d["receiver"])] = NflogEntry.from_dict(d)
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed alerting state entry in Redis")
        acks = {
            a.decode() if isinstance(a, bytes) else str(a)
            for a in await self._r.smembers(f"{self._prefix}:acks")
        }
        return entries, acks

    async def save(self, entries: Mapping[Key, NflogEntry], acks: set[str] | None) -> None:
        pipe = self._r.pipeline(transaction=True)
        for key, e in entries.items():
            doc = {"group_key": key[0], "receiver": key[1], **e.to_dict()}
            pipe.set(self._key(key), json.dumps(doc), ex=self._ttl)
        if acks is not None:
            pipe.delete(f"{self._prefix}:acks")
            if acks:
                pipe.sadd(f"{self._prefix}:acks", *sorted(acks))
                pipe.expire(f"{self._prefix}:acks", self._ttl)
        await pipe.execute()

    async def close(self) -> None:
        await self._r.aclose()
