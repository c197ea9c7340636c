"""ResultCache against a real Redis server."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import redis.asyncio as aioredis

from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.schemas import CacheControl
from tests.support.ports import free_port

pytestmark = pytest.mark.redis

EXACT = CacheConfig(mode="exact", ttl_s=30)
READ_WRITE = CacheControl()


def compute_for(value: float, calls: list[float]):
    async def compute():
        calls.append(value)
        out = {"y": np.full((2, 3), value, dtype=np.float32), "label": np.array([int(value)])}
        return CachedAnswer(outputs=out, served_by="gpu:m@1", version="1"), True

    return compute


async def get(cache, value, calls, *, version="1", control=READ_WRITE, policy=EXACT):
    return await cache.get_or_compute(
        model="m",
        version=version,
        inputs={"x": np.array([value], dtype=np.float32)},
        text=None,
        policy=policy,
        control=control,
        compute=compute_for(value, calls),
    )


@pytest.fixture
async def pair(redis_url, key_prefix):
    """Two caches sharing one Redis (two router replicas)."""
    settings = CacheSettings(redis_url=redis_url, key_prefix=key_prefix, redis_timeout_s=0.5)
    a, b = ResultCache(settings), ResultCache(settings)
    yield a, b
    await a.close()
    await b.close()
    assert a.idle and b.idle


async def test_shared_exact_tier_across_replicas(pair):
    a, b = pair
    calls: list[float] = []
    ans_a, out_a = await get(a, 3.0, calls)
    ans_b, out_b = await get(b, 3.0, calls)
    assert (out_a.tier, out_b.tier) == ("miss", "redis") and calls == [3.0]
    for name in ("y", "label"):
        np.testing.assert_array_equal(ans_b.outputs[name], ans_a.outputs[name])
        assert ans_b.outputs[name].dtype == ans_a.outputs[name].dtype
    assert ans_b.served_by == "gpu:m@1" and ans_b.version == "1"
    # written back into b's memory tier
    assert (await get(b, 3.0, calls))[1].tier == "memory"
    snap = b.counters()
    assert snap["redis.hit"] == 1 and snap["memory.hit"] == 1


async def test_ttl_is_set_in_redis_and_values_are_not_pickled(pair, redis_url, key_prefix):
    a, _ = pair
    await get(a, 4.0, [], policy=CacheConfig(mode="exact", ttl_s=7))
    raw = aioredis.from_url(redis_url)
    try:
        keys = [k async for k in raw.scan_iter(match=f"{key_prefix}*")]
        assert len(keys) == 1 and keys[0].decode().startswith(f"{key_prefix}m@1:")
        ttl = await raw.ttl(keys[0])
        payload = await raw.get(keys[0])
    finally:
        await raw.aclose()
    assert 0 < ttl <= 7
    assert payload.startswith(b"TSRC1") and b"\x80\x04" not in payload[:2]


async def test_new_version_never_reads_old_results(pair):
    a, b = pair
    calls: list[float] = []
    await get(a, 5.0, calls, version="1")
    _, outcome = await get(b, 5.0, calls, version="2")
    assert outcome.tier == "miss" and len(calls) == 2


async def test_skip_controls_with_redis(pair):
    a, b = pair
    calls: list[float] = []
    await get(a, 6.0, calls, control=CacheControl(skip_write=True))
    assert (await get(b, 6.0, calls))[1].tier == "miss"
    _, outcome = await get(a, 6.0, calls, control=CacheControl(skip_read=True))
    assert outcome.tier == "off" and len(calls) == 3


async def test_unreachable_redis_is_bypassed_from_the_start(key_prefix):
    events = []
    port = free_port()  # nothing listens there
    cache = ResultCache(
        CacheSettings(redis_url=f"redis://127.0.0.1:{port}/0", key_prefix=key_prefix),
        on_event=lambda kind, detail: events.append(kind),
    )
    try:
        calls: list[float] = []
        outcomes = [(await get(cache, float(i), calls))[1].tier for i in range(5)]
        assert outcomes == ["bypass"] * 5 and len(calls) == 5
        assert events == ["redis_cache_unavailable"] and cache.redis_available is False
        assert cache.counters()["redis.bypass"] == 5
    finally:
        await cache.close()


async def test_redis_killed_mid_run_then_restarted(own_redis, key_prefix):
    """A loop of requests keeps being served while Redis dies and returns on the same port."""
    events: list[tuple[str, dict]] = []  # (kind, detail)
    cache = ResultCache(
        CacheSettings(
            redis_url=own_redis.url,
            key_prefix=key_prefix,
            # A killed server refuses connections at once; the timeout only has to outlast a
            # busy 2-core machine, so a slow answer is not counted as a second outage.
            redis_timeout_s=1.0,
            redis_backoff_s=0.1,
            redis_backoff_max_s=0.2,
        ),
        on_event=lambda kind, detail: events.append((kind, detail)),
    )
    outcomes: list[str] = []
    failures: list[BaseException] = []
    stop = asyncio.Event()
    counter = 0

    async def client():
        nonlocal counter
        while not stop.is_set():
            counter += 1
            value = float(counter % 50)
            cache.clear_memory()  # force every request down to the Redis tier
            try:
                _, outcome = await get(cache, value, [])
                outcomes.append(outcome.tier)
            except BaseException as e:  # noqa: BLE001 - the test counts every failure
                failures.append(e)
            await asyncio.sleep(0.002)

    async def wait_for(pred, timeout=10.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while not pred():
            assert asyncio.get_running_loop().time() < deadline, f"timed out; events={events}"
            await asyncio.sleep(0.01)

    workers = [asyncio.create_task(client()) for _ in range(4)]
    try:
        await wait_for(lambda: outcomes.count("redis") >= 20)
        own_redis.kill()
        killed_at = len(outcomes)
        await wait_for(lambda: outcomes[killed_at:].count("bypass") >= 20)
        assert cache.redis_available is False
        await asyncio.sleep(0.3)  # several failed probes while it is down
        own_redis.start()  # same port
        await wait_for(lambda: cache.redis_available is True)
        back_at = len(outcomes)
        await wait_for(lambda: outcomes[back_at:].count("redis") >= 10)
    finally:
        stop.set()
        await asyncio.gather(*workers)
        await cache.close()
    assert failures == []
    kinds = [kind for kind, _ in events]
    assert kinds.count("redis_cache_unavailable") == 1, events
    assert kinds.count("redis_cache_recovered") == 1, events
    assert set(outcomes[back_at:]) <= {"redis", "miss", "bypass"}
    assert cache.counters()["redis.bypass"] >= 20
