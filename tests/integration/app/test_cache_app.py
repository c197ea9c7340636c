"""The result cache and the call log through the running app (HTTP v2 + GET /v2/status).

Every test uses inputs of its own (a seeded random digit image nobody else sends) so cache
entries left by other tests in this session cannot answer for it. Counter checks read deltas of
the ingress' cache counters around the requests of one test (tests run one at a time).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import shutil
import threading
import uuid

import numpy as np
import pytest
import yaml

from tests.integration.app.appkit import HANG, make_chaos_model
from tests.support.app import API_KEY
from tests.support.v2 import v2_body

SMALL, LARGE = "digits-small", "digits-large"
VERSIONED = "cache-versions"  # an iris model of this file's own with versions 1 and 2
SLOW = "cache-slow"  # a chaos model that hangs 1.5 s on HANG rows, with the exact cache on


def _fresh(seed: int, rows: int = 1) -> np.ndarray:
    """A digit-like image (values 0..16) no other test sends."""
    rng = np.random.default_rng(seed * 7919 + 17)
    return rng.integers(0, 17, size=(rows, 64)).astype(np.float32) + 0.25


def _infer(http, model: str, x: np.ndarray, *, name: str = "pixels", version: str | None = None,
           body: dict | None = None, **params) -> dict:
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    r = http.post(path, json=body or v2_body(name, x, **params))
    assert r.status_code == 200, r.text
    return r.json()


def _out(resp: dict) -> np.ndarray:
    o = resp["outputs"][0]
    return np.asarray(o["data"], dtype=np.float32).reshape(o["shape"])


def _counters(http) -> dict[str, int]:
    return http.get("/v2/status", headers={"X-API-Key": API_KEY}).json()["cache"]["counters"]


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if
            after.get(k, 0) != before.get(k, 0)}


@pytest.fixture(scope="module")
def own_models(app, http_module):
    """Add this file's models to the live repository and wait until they serve."""
    repo = app.repo
    src = repo / "iris-mlp1x16"
    shutil.copytree(src, repo / VERSIONED, ignore=shutil.ignore_patterns("2*"))
    shutil.copytree(src / "1", repo / VERSIONED / "2")  # same weights: only the version differs
    cfg = yaml.safe_load((repo / VERSIONED / "config.yaml").read_text())
    cfg["name"] = VERSIONED
    (repo / VERSIONED / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    make_chaos_model(repo, SLOW, hang_s=1.5, deadline_ms=10_000)
    cfg = yaml.safe_load((repo / SLOW / "config.yaml").read_text())
    cfg["cache"] = {"mode": "exact", "ttl_s": 300}
    (repo / SLOW / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    iris = np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32)

    def serving() -> bool:
        return all(http_module.post(path, json=v2_body("features", iris)).status_code == 200
                   for path in (f"/v2/models/{VERSIONED}/versions/1/infer",
                                f"/v2/models/{VERSIONED}/versions/2/infer",
                                f"/v2/models/{SLOW}/infer"))

    app.wait_for(serving, 60, "this file's models to load")


@pytest.fixture(scope="module")
def http_module(app):
    with app.client() as c:
        yield c


def test_exact_hits_and_misses_are_labelled(http):
    x = _fresh(1)
    first = _infer(http, SMALL, x)
    assert first["parameters"]["cache"] == "miss"
    again = _infer(http, SMALL, x)
    assert again["parameters"]["cache"] == "memory"
    np.testing.assert_array_equal(_out(again), _out(first))
    assert again["parameters"]["served_by"] == first["parameters"]["served_by"] == \
        f"cpu:{SMALL}@1"
    # another model never answers from digits-small's entry
    other = _infer(http, LARGE, x)
    assert other["parameters"]["cache"] == "miss"
    assert other["parameters"]["served_by"] == f"cpu:{LARGE}@1"
    assert not np.array_equal(_out(other), _out(first))
    # the same image in a batch of two is another shape: a miss
    pair = _infer(http, SMALL, np.concatenate([x, x]))
    assert pair["parameters"]["cache"] == "miss"
    # skip_read: computed again, labelled off, same answer
    skipped = _infer(http, SMALL, x, cache_skip_read=True)
    assert skipped["parameters"]["cache"] == "off"
    np.testing.assert_array_equal(_out(skipped), _out(first))
    # skip_write on a fresh image: computed, and the next identical request still misses
    y = _fresh(2)
    assert _infer(http, SMALL, y, cache_skip_write=True)["parameters"]["cache"] == "miss"
    assert _infer(http, SMALL, y)["parameters"]["cache"] == "miss"
    assert _infer(http, SMALL, y)["parameters"]["cache"] == "memory"


def test_wire_dtype_is_part_of_the_key(http):
    """The key is the canonical encoding of the inputs as sent (dtype, shape, bytes), so INT64
    pixels with the same values as FP32 ones are another key (the model still gives the same
    answer for both); FP32 pixels with different values never share an entry either."""
    x = np.floor(_fresh(3))  # integral values: exact in both dtypes
    first = _infer(http, SMALL, x)
    assert first["parameters"]["cache"] == "miss"
    as_int = {"inputs": [{"name": "pixels", "shape": [1, 64], "datatype": "INT64",
                          "data": x.astype(np.int64).reshape(-1).tolist()}]}
    other = _infer(http, SMALL, x, body=as_int)
    assert other["parameters"]["cache"] == "miss"
    np.testing.assert_array_equal(_out(other), _out(first))
    assert _infer(http, SMALL, x, body=as_int)["parameters"]["cache"] == "memory"
    nudged = x.copy()
    nudged[0, 5] += 0.5
    assert _infer(http, SMALL, nudged)["parameters"]["cache"] == "miss"


def test_a_new_version_never_serves_the_old_versions_entry(http, own_models):
    x = np.array([[6.3, 2.9, 5.6, 1.8]], dtype=np.float32)
    v1 = _infer(http, VERSIONED, x, name="features", version="1")
    assert v1["parameters"]["cache"] == "miss" and v1["model_version"] == "1"
    assert _infer(http, VERSIONED, x, name="features", version="1")["parameters"]["cache"] \
        == "memory"
    # identical weights, identical input: still a separate entry per version
    v2 = _infer(http, VERSIONED, x, name="features", version="2")
    assert v2["parameters"]["cache"] == "miss"
    assert v2["parameters"]["served_by"] == f"cpu:{VERSIONED}@2"
    np.testing.assert_array_equal(_out(v2), _out(v1))
    latest = _infer(http, VERSIONED, x, name="features")  # default version = 2
    assert latest["parameters"]["cache"] == "memory" and latest["model_version"] == "2"


def test_degraded_answers_are_never_cached(http):
    x = _fresh(4)
    before = _counters(http)
    rushed = _infer(http, LARGE, x, deadline_ms=1)
    assert rushed["parameters"]["degraded"] is True, rushed["parameters"]
    assert rushed["parameters"]["served_by"] != f"cpu:{LARGE}@1"
    assert rushed["parameters"]["cache"] == "miss"
    assert _delta(before, _counters(http)).get("skip.uncacheable") == 1
    # the same image with time to spare: digits-large computes it, no cached degraded answer
    full = _infer(http, LARGE, x)
    assert full["parameters"]["cache"] == "miss", full["parameters"]
    assert full["parameters"]["degraded"] is False
    assert full["parameters"]["served_by"] == f"cpu:{LARGE}@1"
    again = _infer(http, LARGE, x)
    assert again["parameters"]["cache"] == "memory"
    assert again["parameters"]["served_by"] == f"cpu:{LARGE}@1"
    np.testing.assert_array_equal(_out(again), _out(full))


def test_identical_concurrent_requests_compute_once(app, http, own_models):
    n = 8
    x = np.array([[HANG, 3.1, 4.2, 1.3]], dtype=np.float32)  # each compute hangs 1.5 s
    before = _counters(http)
    start = threading.Barrier(n)

    def one(_: int) -> dict:
        with app.client() as c:
            start.wait(30)
            return _infer(c, SLOW, x, name="features")

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        answers = list(pool.map(one, range(n)))
    d = _delta(before, _counters(http))
    assert d.get("compute") == 1, d
    assert d.get("single_flight.shared", 0) + d.get("memory.hit", 0) == n - 1, d
    assert d.get("single_flight.shared", 0) >= 1, d  # they overlapped the 1.5 s compute
    labels = [a["parameters"]["cache"] for a in answers]
    assert set(labels) <= {"miss", "memory"} and "miss" in labels, labels
    assert all(not a["parameters"]["degraded"] for a in answers)
    for a in answers[1:]:
        np.testing.assert_array_equal(_out(a), _out(answers[0]))


def test_redis_tier_serves_an_entry_written_by_another_replica(app, http):
    """A second cache (as another ingress replica would) fills the shared Redis; the app answers
    from it (label ``redis``), counts it, and keeps a copy in process."""
    if app.redis is None:
        pytest.skip("redis-server binary not installed: the app runs without the Redis tier")
    from pool.config import CacheConfig
    from router.cache import CachedAnswer, CacheSettings, ResultCache
    from router.schemas import CacheControl

    app.wait_for(lambda: http.get("/v2/status", headers={"X-API-Key": API_KEY}).json()[
        "cache"]["redis_available"] is True,
                 30, "the Redis tier to be up")
    x = _fresh(5)
    before = _counters(http)
    computed = _infer(http, SMALL, x, cache_skip_write=True)  # looked everywhere, stored nowhere
    assert computed["parameters"]["cache"] == "miss"
    d = _delta(before, _counters(http))
    assert d.get("redis.miss") == 1 and "redis.write" not in d, d

    async def other_replica_fills() -> None:
        cache = ResultCache(CacheSettings(redis_url=app.redis.url))
        answer = CachedAnswer(outputs={"logits": _out(computed)},
                              served_by=computed["parameters"]["served_by"], version="1")

        async def compute():
            return answer, True

        try:
            _, outcome = await cache.get_or_compute(
                model=SMALL, version="1", inputs={"pixels": x}, text=None,
                policy=CacheConfig(mode="exact", ttl_s=300), control=CacheControl(),
                compute=compute)
            assert outcome.tier == "miss"
            assert cache.counters().get("redis.write") == 1
        finally:
            await cache.close()

    asyncio.run(other_replica_fills())
    before = _counters(http)
    shared = _infer(http, SMALL, x)
    assert shared["parameters"]["cache"] == "redis"
    assert shared["parameters"]["served_by"] == f"cpu:{SMALL}@1"
    np.testing.assert_array_equal(_out(shared), _out(computed))
    assert _delta(before, _counters(http)).get("redis.hit") == 1
    assert _infer(http, SMALL, x)["parameters"]["cache"] == "memory"  # written back in process
    # a fresh image through the app is written to Redis too
    before = _counters(http)
    assert _infer(http, SMALL, _fresh(6))["parameters"]["cache"] == "miss"
    d = _delta(before, _counters(http))
    assert d.get("redis.miss") == 1 and d.get("redis.write") == 1, d


def test_call_log_records_each_caller_for_usage_reports(app, http, capsys):
    from deploy.usage import main

    caller = f"usage-{uuid.uuid4().hex[:8]}"
    x = _fresh(7)
    for _ in range(2):
        _infer(http, SMALL, x, caller=caller)  # a miss, then a memory hit
    _infer(http, LARGE, x, caller=caller, priority="batch")

    def lines() -> list[dict]:
        if not app.call_log.exists():
            return []
        rows = [json.loads(ln) for ln in app.call_log.read_text().splitlines() if ln.strip()]
        return [r for r in rows if r["caller"] == caller]

    app.wait_for(lambda: len(lines()) == 3, 30, "the call log lines")  # written asynchronously
    recs = lines()
    assert [(r["model"], r["cache"], r["priority"]) for r in recs] == [
        (SMALL, "miss", "interactive"), (SMALL, "memory", "interactive"),
        (LARGE, "miss", "batch")]
    assert all(r["bytes_in"] == 64 * 4 and r["bytes_out"] == 10 * 4 for r in recs)
    assert recs[0]["served_by"] == f"cpu:{SMALL}@1" and recs[2]["served_by"] == f"cpu:{LARGE}@1"
    assert recs[0]["device_ms"] > 0 and recs[1]["device_ms"] == 0  # a hit costs no device time

    capsys.readouterr()
    assert main(["--since", "1h", "--by", "caller", "--log", str(app.call_log), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    mine = [r for r in rows if r["caller"] == caller]
    assert len(mine) == 1, rows
    assert mine[0]["requests"] == 3
    assert mine[0]["cache_hits"] == pytest.approx(1 / 3)
    assert mine[0]["degraded"] == 0
    assert mine[0]["device_s"] == pytest.approx(
        sum(r["device_ms"] for r in recs) / 1000, rel=1e-6)
