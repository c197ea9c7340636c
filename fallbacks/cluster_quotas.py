"""Cluster-wide caller rate limits: one atomic GCRA script in a shared Redis per request.

With N ingress replicas, per-process token buckets give a caller N times its rate. Here every
replica asks Redis, in one round trip (``EVALSHA`` of :data:`GCRA_LUA`), whether the caller may
send now; the script reads the server's clock (``TIME``), so replicas on different nodes never
disagree through clock skew, and it is atomic, so concurrent replicas cannot both take the last
slot. GCRA (the generic cell rate algorithm) is a token bucket kept as one timestamp per caller:
the "theoretical arrival time" of the next request.

What stays local, and why (Google SRE "Handling Overload": a global quota backed by local
decisions):

- **Redis unavailable** (error, or slower than ``redis_timeout_s``): the replica decides alone
  with its share of the rate (``rate / N``), answers carry ``quota='local'``, an alert
  (``TimeshareQuotaStoreDown``) fires through the alert rules, and no request fails because of
  it. Redis is probed again after ``redis_retry_s``, not per request.
- **Concurrency** stays per replica (a global in-flight count would leak a slot for every
  replica that dies mid-request): each replica admits ``ceil(max_concurrency / N)``, so the
  cluster admits at most ``N * ceil(max_concurrency / N)`` in flight (< limit + N).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from common.clock import Clock
from fallbacks.errors import QuotaExceeded
from fallbacks.quotas import CallerQuotas, QuotaConfig, QuotaLease

__all__ = ["GCRA_LUA", "ClusterQuotas"]

log = logging.getLogger(__name__)

GCRA_LUA = """
-- KEYS[1]: the caller's key. ARGV[1]: emission interval (us) = 1e6 / rate.
-- ARGV[2]: burst tolerance (us) = interval * burst. Returns {allowed, retry_after_us}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > tolerance then
  return {0, new_tat - now - tolerance}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX',
           math.ceil((new_tat - now) / 1000) + 1)
return {1, 0}
"""


class ClusterQuotas(CallerQuotas):
    """Rate limits shared by every ingress replica through Redis; see the module docstring.

    ``replicas`` is the number of ingress replicas sharing the limits (the lowest count under
    autoscaling: the local fallback then errs towards admitting, never towards starving).
    """

    def __init__(self, config: QuotaConfig, *, replicas: int = 1,
                 clock: Clock = time.monotonic) -> None:
        if config.redis_url is None:
            raise ValueError("ClusterQuotas needs quotas.redis_url")
        super().__init__(config, clock=clock, share=1.0 / replicas)
        pool = aioredis.BlockingConnectionPool.from_url(
            config.redis_url, max_connections=64, timeout=config.redis_timeout_s,
            socket_timeout=config.redis_timeout_s,
            socket_connect_timeout=config.redis_timeout_s,
            retry=Retry(NoBackoff(), 0), health_check_interval=0)
        self._redis = aioredis.Redis(connection_pool=pool)
        self._script = self._redis.register_script(GCRA_LUA)
        self._down_until = 0.0  # monotonic time before which Redis is not tried again
        self.redis_available: bool | None = None  # None: not asked yet

    async def admit(self, caller: str) -> QuotaLease:
        lim = self.config.limits_for(caller)  # the cluster-wide limits, not this replica's
        if lim.rate_per_s is None:
            return self.acquire(caller)
        allowed = await self._ask_redis(caller, lim.rate_per_s, lim.burst)
        if allowed is None:  # store unavailable: this replica's share of the rate, labelled
            return self.acquire(caller, local_fallback=True)
        if not allowed:
            raise QuotaExceeded(f"caller {caller!r} is over its rate limit "
                                f"({lim.rate_per_s:g}/s across the cluster)", field="caller")
        return self.acquire(caller, check_rate=False)

    async def _ask_redis(self, caller: str, rate: float, burst: int | None) -> bool | None:
        """True/False: Redis's decision; None: Redis unavailable (decide locally)."""
        now = self._clock()
        if now < self._down_until:
            return None
        interval = 1e6 / rate
        size = burst if burst is not None else max(1, math.ceil(rate))
        try:
            allowed = await asyncio.wait_for(self._gcra(caller, interval, interval * size),
                                             self.config.redis_timeout_s)
        except Exception as e:  # noqa: BLE001 - any failure of the store means "decide locally"
            if self.redis_available is not False:
                log.warning("quota store unavailable (%s: %s): rate limits are per replica",
                            type(e).__name__, e)
            self.redis_available = False
            self._down_until = now + self.config.redis_retry_s
            return None
        if self.redis_available is False:
            log.warning("quota store is back: rate limits are cluster-wide again")
        self.redis_available = True
        return bool(allowed)

    async def _gcra(self, caller: str, interval_us: float, tolerance_us: float) -> int:
        if self.redis_available is False:
            # the probe after an outage: pooled connections from before it are stale
            await self._redis.connection_pool.disconnect(inuse_connections=False)
        allowed, _ = await self._script(  # EVALSHA; loads the script once if Redis lacks it
            keys=[self.config.key_prefix + caller], args=[interval_us, tolerance_us])
        return int(allowed)

    async def close(self) -> None:
        """Close the Redis connections."""
        await self._redis.aclose()
