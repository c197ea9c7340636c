"""ResultCache without Redis: in-process tier, policy, controls, single flight, counters."""

import asyncio

import numpy as np
import pytest

from pool.config import CacheConfig
from router.cache import CachedAnswer, CacheSettings, ResultCache
from router.schemas import CacheControl
from tests.support.cache import CountingModel

X = {"x": np.array([1.0, 2.0], dtype=np.float32)}
EXACT = CacheConfig(mode="exact", ttl_s=60)
READ_WRITE = CacheControl()


@pytest.fixture
async def cache(clock):
    c = ResultCache(CacheSettings(), clock=clock)
    yield c
    await c.close()
    assert c.idle  # nothing leaked: no flights, no pending writes


async def call(cache, model, *, inputs=X, version="1", policy=EXACT, control=READ_WRITE, v=1.0):
    return await cache.get_or_compute(
        model="m",
        version=version,
        inputs=inputs,
        text=None,
        policy=policy,
        control=control,
        compute=model(v),
    )


async def test_miss_then_memory_hit(cache):
    model = CountingModel()
    a1, o1 = await call(cache, model)
    a2, o2 = await call(cache, model)
    assert (o1.tier, o2.tier) == ("miss", "memory") and model.calls == 1
    np.testing.assert_array_equal(a2.outputs["y"], a1.outputs["y"])
    assert a2.served_by == "gpu:m@1" and not a2.outputs["y"].flags.writeable
    snap = cache.counters()
    assert snap["memory.hit"] == 1 and snap["memory.miss"] == 1 and snap["compute"] == 1


async def test_caller_mutation_does_not_corrupt_the_entry(cache):
    model = CountingModel()
    a1, _ = await call(cache, model)
    a1.outputs["y"][:] = -5  # the caller owns what compute returned
    a2, o2 = await call(cache, model)
    assert o2.tier == "memory" and float(a2.outputs["y"][0]) == 1.0


async def test_dtype_and_version_isolate_entries(cache):
    model = CountingModel()
    await call(cache, model, inputs={"x": np.array([1, 2], dtype=np.int64)})
    _, o = await call(cache, model, inputs={"x": np.array([1, 2], dtype=np.float64)})
    assert o.tier == "miss"
    _, o = await call(cache, model, version="2")
    assert o.tier == "miss"
    assert model.calls == 3


async def test_mode_none_never_reads_or_writes(cache):
    model = CountingModel()
    for _ in range(2):
        _, o = await call(cache, model, policy=CacheConfig(mode="none"))
        assert o.tier == "off"
    assert model.calls == 2


async def test_skip_read_computes_and_still_writes(cache):
    model = CountingModel()
    _, o = await call(cache, model, control=CacheControl(skip_read=True), v=2.0)
    assert o.tier == "off"
    a, o = await call(cache, model)
    assert o.tier == "memory" and float(a.outputs["y"][0]) == 2.0 and model.calls == 1


async def test_skip_write_does_not_store(cache):
    model = CountingModel()
    await call(cache, model, control=CacheControl(skip_write=True))
    _, o = await call(cache, model)
    assert o.tier == "miss" and model.calls == 2


async def test_uncacheable_answers_are_not_stored(cache):
    model = CountingModel(cacheable=False)
    await call(cache, model)
    _, o = await call(cache, model)
    assert o.tier == "miss" and model.calls == 2
    assert cache.counters()["skip.uncacheable"] == 2


async def test_max_value_bytes(cache):
    model = CountingModel(size=100)  # 400 bytes of float32
    small = CacheConfig(mode="exact", max_value_bytes=399)
    await call(cache, model, policy=small)
    _, o = await call(cache, model, policy=small)
    assert o.tier == "miss" and cache.counters()["skip.too_large"] == 2
    ok = CacheConfig(mode="exact", max_value_bytes=400)
    await call(cache, model, policy=ok)
    _, o = await call(cache, model, policy=ok)
    assert o.tier == "memory"


async def test_ttl_per_model_policy(cache, clock):
    model = CountingModel()
    short = CacheConfig(mode="exact", ttl_s=5)
    await call(cache, model, policy=short)
    clock.advance(4)
    assert (await call(cache, model, policy=short))[1].tier == "memory"
    clock.advance(2)
    assert (await call(cache, model, policy=short))[1].tier == "miss"


async def test_single_flight_through_the_facade(cache):
    gate = asyncio.Event()
    calls = 0

    async def slow():
        nonlocal calls
        calls += 1
        await gate.wait()
        return CachedAnswer(outputs={"y": np.ones(2)}, served_by="s"), True

    async def one():
        return await cache.get_or_compute(
            model="m",
            version="1",
            inputs=X,
            text=None,
            policy=EXACT,
            control=READ_WRITE,
            compute=slow,
        )

    tasks = [asyncio.create_task(one()) for _ in range(8)]
    await asyncio.sleep(0.01)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert calls == 1
    assert sorted(o.shared for _, o in results) == [False] + [True] * 7
    assert {o.tier for _, o in results} == {"miss"}
    assert cache.counters()["single_flight.shared"] == 7


async def test_compute_errors_propagate_and_are_not_cached(cache):
    async def broken():
        raise RuntimeError("model crashed")

    for _ in range(2):
        with pytest.raises(RuntimeError, match="model crashed"):
            await cache.get_or_compute(
                model="m",
                version="1",
                inputs=X,
                text=None,
                policy=EXACT,
                control=READ_WRITE,
                compute=broken,
            )
    assert cache.counters()["compute"] == 2


def test_semantic_dir_without_embedder_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="embedder"):
        ResultCache(CacheSettings(semantic_dir=str(tmp_path)))


def test_settings_validation_names_the_field():
    with pytest.raises(ValueError, match="redis_url"):
        CacheSettings(redis_url="http://localhost")
    with pytest.raises(ValueError, match="redis_backoff_max_s"):
        CacheSettings(redis_backoff_s=5, redis_backoff_max_s=1)


def _lookup(cache):
    return cache.lookup(model="m", version="1", inputs=X, text=None, policy=EXACT,
                        control=READ_WRITE)


async def test_the_pipelines_steps_lookup_store_then_hit(cache):
    first = await _lookup(cache)
    assert first.answer is None and first.outcome.tier == "miss"
    waiting = asyncio.create_task(_lookup(cache))  # the same key, meanwhile: it waits
    await asyncio.sleep(0.01)
    assert not waiting.done()
    answer = CachedAnswer(outputs={"y": np.ones(2)}, served_by="m")
    await cache.store(first, answer, True)
    shared = await waiting
    assert shared.answer is answer and shared.outcome.shared
    hit = await _lookup(cache)
    assert hit.outcome.tier == "memory" and hit.answer.served_by == "m"
    assert cache.counters()["compute"] == 1


async def test_a_failed_computation_is_released_to_its_waiters_and_not_stored(cache):
    first = await _lookup(cache)
    waiting = asyncio.create_task(_lookup(cache))
    await asyncio.sleep(0.01)
    cache.release(first, RuntimeError("model crashed"))
    with pytest.raises(RuntimeError, match="model crashed"):
        await waiting
    again = await _lookup(cache)
    assert again.answer is None  # nothing was stored: the next caller computes
    cache.release(again, RuntimeError("done with the test"))


async def test_a_leader_that_goes_away_lets_a_waiter_compute(cache):
    first = await _lookup(cache)
    waiting = asyncio.create_task(_lookup(cache))
    await asyncio.sleep(0.01)
    cache.release(first, asyncio.CancelledError())
    second = await waiting
    assert second.answer is None and not second.outcome.shared  # it computes now
    await cache.store(second, CachedAnswer(outputs={"y": np.zeros(2)}, served_by="m"), True)
    assert (await _lookup(cache)).outcome.tier == "memory"
