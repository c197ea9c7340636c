"""Call log on a real Redis stream, read back by `timeshare usage --redis`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from deploy.usage import main
from router.calllog import CallLog, CallRecord, RedisStreamSink
from tests.support.ports import free_port

NOW = 1_700_000_000.0

@pytest.fixture
def stream(redis_url: str, key_prefix: str) -> Iterator[str]:
    key = f"{key_prefix}calls"
    yield key
    redis.Redis.from_url(redis_url).delete(key)


def rec(i: int, caller: str, device_ms: float, *, age_s: float = 10.0) -> CallRecord:
    return CallRecord(ts=NOW - age_s, request_id=f"r{i}", caller=caller, model="digits",
                      version=None, served_by="cpu:digits-small@1", device_ms=device_ms,
                      cache="off", degraded=i % 2 == 0, bytes_in=100, bytes_out=10,
                      priority="batch")


@pytest.mark.redis
async def test_usage_from_redis_stream(stream: str, redis_url: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    log = CallLog(RedisStreamSink(redis_url, stream=stream), batch_size=50)
    for i in range(1500):  # more than one XRANGE page
        log.record(rec(i, "team-a" if i < 1200 else "team-b", 10.0))
    log.record(rec(9999, "team-old", 10_000.0, age_s=2 * 86400))
    await log.close()
    assert log.stats.written == 1501 and log.stats.dropped == 0

    r = redis.Redis.from_url(redis_url)
    first = r.xrange(stream, count=1)[0][1]
    assert first[b"caller"] == b"team-a" and first[b"version"] == b""

    # Stream ids are Redis's clock, record ts is ours: --since filters on the record's ts.
    code = main(["--redis", redis_url, "--stream", stream, "--since", "1d", "--json"],
                clock=lambda: NOW)
    assert code == 0
    rows = {row["caller"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"team-a", "team-b"}
    assert rows["team-a"]["requests"] == 1200 and rows["team-b"]["requests"] == 300
    assert rows["team-a"]["device_s"] == pytest.approx(12.0)
    assert rows["team-a"]["share"] == pytest.approx(0.8)
    assert rows["team-a"]["degraded"] == pytest.approx(0.5)


@pytest.mark.redis
async def test_stream_is_trimmed_to_maxlen(stream: str, redis_url: str) -> None:
    log = CallLog(RedisStreamSink(redis_url, stream=stream, maxlen=100), batch_size=100)
    for i in range(1000):
        log.record(rec(i, "a", 1.0))
    await log.close()
    n = redis.Redis.from_url(redis_url).xlen(stream)
    assert 100 <= n < 1000  # approximate trimming (MAXLEN ~) keeps whole macro nodes


def test_unreachable_redis_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--redis", f"redis://127.0.0.1:{free_port()}/0"])
    assert code == 2
    assert "cannot read the call log: ConnectionError" in capsys.readouterr().err
