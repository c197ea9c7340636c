"""Call-log writer: never blocks serving, bounded queue, contained sink failures, JSONL sink."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import httpx
import pytest

from deploy.usage import read_jsonl
from router.calllog import CallLog, CallRecord, JsonlSink, build_call_log
from tests.support.app import start_ingress, stop_ingress
from tests.support.v2 import digits_body


def rec(i: int, *, caller: str = "a", ts: float = 1_700_000_000.0) -> CallRecord:
    return CallRecord(ts=ts + i, request_id=f"r{i}", caller=caller, model="digits",
                      version="1", served_by="gpu:digits-small@1", device_ms=2.5, cache="miss",
                      degraded=False, bytes_in=256, bytes_out=32, priority="interactive")


class BlockedSink:
    """A sink stuck until ``release`` is set (a hung disk or network); implements CallLogSink."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()
        self.written: list[CallRecord] = []

    async def write(self, records: list[CallRecord]) -> None:
        self.entered.set()
        await self.release.wait()
        self.written.extend(records)

    async def aclose(self) -> None:
        return None


class FailingSink(BlockedSink):
    async def write(self, records: list[CallRecord]) -> None:
        raise ConnectionError("sink down")


async def test_record_never_waits_for_a_stuck_sink() -> None:
    sink = BlockedSink()
    log = CallLog(sink, max_queue=1000, batch_size=8)
    assert log.record(rec(0))
    await sink.entered.wait()  # the drain task is now stuck inside the sink
    # Serving keeps going: record() is synchronous and returns while the sink is stuck.
    assert all(log.record(rec(i)) for i in range(1, 200))
    await asyncio.sleep(0.01)
    assert log.pending == 199 and sink.written == []
    sink.release.set()
    await log.close()
    assert [r.request_id for r in sink.written] == [f"r{i}" for i in range(200)]
    assert log.stats.written == 200 and log.stats.dropped == 0


async def test_queue_is_bounded_and_drops_are_counted() -> None:
    sink = BlockedSink()
    log = CallLog(sink, max_queue=10, batch_size=4)
    accepted = [log.record(rec(i)) for i in range(25)]
    assert accepted == [True] * 10 + [False] * 15
    assert log.stats.dropped == 15 and log.pending == 10
    sink.release.set()
    await log.close()
    assert len(sink.written) == 10 and log.stats.written == 10
    assert log.record(rec(99)) is False and log.stats.dropped == 16  # closed


async def test_failing_sink_is_counted_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    log = CallLog(FailingSink(), batch_size=5)
    for i in range(12):
        assert log.record(rec(i))
    await log.close()
    assert log.stats.failed == 12 and log.stats.sink_errors >= 1 and log.stats.written == 0
    assert "sink write" in caplog.text


async def test_close_flushes_everything_to_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    log = build_call_log(path=path, max_queue=5000)
    for i in range(3000):
        log.record(rec(i))
    await log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 3000
    assert CallRecord.from_dict(json.loads(lines[17])) == rec(17)


async def test_jsonl_lines_are_utf8_json_of_every_field(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    sink = JsonlSink(path)
    await sink.write([rec(1, caller="café-東京"), rec(2)])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [CallRecord.from_dict(json.loads(x)) for x in lines] == [rec(1, caller="café-東京"),
                                                                   rec(2)]
    assert list(json.loads(lines[1])) == list(rec(2).to_dict())  # the fields, in order
    # to_dict is written out field by field: it must name every field of the record, in order
    assert list(rec(2).to_dict()) == [f.name for f in dataclasses.fields(CallRecord)]
    assert rec(2).to_dict() == dataclasses.asdict(rec(2))


async def test_jsonl_rotation_by_size_keeps_every_record(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    sink = JsonlSink(path, max_bytes=4000, backups=50)
    log = CallLog(sink, batch_size=10)
    for i in range(200):
        log.record(rec(i))
    await log.close()
    rotated = sorted(tmp_path.glob("calls.jsonl.*"))
    assert rotated, "expected rotated files"
    assert all(p.stat().st_size <= 4000 for p in [path, *rotated])
    got = sorted(int(r.request_id[1:]) for r in read_jsonl(path))
    assert got == list(range(200))


def test_record_round_trips_and_bad_fields_are_named() -> None:
    r = rec(1)
    assert CallRecord.from_dict(r.to_dict()) == r
    assert CallRecord.from_dict(r.to_fields()) == r  # Redis stream fields are all strings
    d = r.to_dict()
    del d["caller"]
    with pytest.raises(ValueError, match="missing field 'caller'"):
        CallRecord.from_dict(d)
    with pytest.raises(ValueError, match="degraded must be a boolean"):
        CallRecord.from_dict({**r.to_dict(), "degraded": "maybe"})
    with pytest.raises(ValueError, match="give path"):
        build_call_log()


class CountingSink(BlockedSink):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    async def write(self, records: list[CallRecord]) -> None:
        await asyncio.sleep(0.002)  # a disk write's thread hop
        self.batches.append(len(records))
        self.written.extend(records)


async def test_a_steady_trickle_is_written_once_per_linger_not_once_per_record() -> None:
    sink = CountingSink()
    log = CallLog(sink, batch_size=256, linger_s=0.05)
    for i in range(100):  # 100 records over about 0.1 s
        assert log.record(rec(i))
        await asyncio.sleep(0.001)
    await log.close()
    assert [r.request_id for r in sink.written] == [f"r{i}" for i in range(100)]
    assert len(sink.batches) <= 5, sink.batches  # per record it would be dozens of writes


async def test_an_app_with_the_call_log_turned_off_serves_and_writes_none(
        demo_repo_master, tmp_path) -> None:
    """``call_log: {path: null}`` (no ``redis_url``) is the operator's off switch: the app
    starts, answers, counts the answer in /v2/status, and writes no call log anywhere."""
    ing = await start_ingress({
        "repository": str(demo_repo_master), "state_dir": str(tmp_path / "state"),
        "cpu_pool": {"placement": "ingress", "memory_budget_mb": 256},
        "call_log": {"path": None}, "default_deadline_ms": 5000}, ready=("digits-small",))
    try:
        assert ing.call_log is None
        transport = httpx.ASGITransport(app=ing.__serve_build_asgi_app__())
        async with httpx.AsyncClient(transport=transport, base_url="http://ts") as c:
            r = await c.post("/v2/models/digits-small/infer", json=digits_body())
            assert r.status_code == 200, r.text
            status = (await c.get("/v2/status")).json()
    finally:
        await stop_ingress(ing)
    assert "digits-small" in json.dumps(status["models"])
    assert not list(tmp_path.rglob("*.jsonl"))
