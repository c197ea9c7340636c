"""The open-loop engine's accounting, the exact histogram merge and the raw HTTP codec."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from deploy.loadtest import CallableTarget, LatencyHistogram, LoadRequest, Outcome, v2_body
from deploy.loadtest._private.http import BodyEncoder, _dechunk, _parse_head, outcome_of
from deploy.loadtest._private.plan import PlannedRequest
from deploy.loadtest._private.runner import Sample, run_open_loop
from deploy.loadtest._private.stats import RunHistograms
from tests.support.clocks import TickingClock


def plan(offsets: list[float]) -> list[PlannedRequest]:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    return [PlannedRequest(t, LoadRequest(f"r{i}", "m", {"x": ("FP32", x)}), measured=True)
            for i, t in enumerate(offsets)]


def test_histograms_merged_across_processes_equal_one_histogram_of_all() -> None:
    vals = np.random.default_rng(2).lognormal(np.log(0.02), 1.0, size=9_000)
    vals[:3] = [0.0, 5000.0, 0.5]  # two clamped values
    whole = LatencyHistogram(vals)
    merged = LatencyHistogram.decode(LatencyHistogram(vals[0::3]).encode())
    for part in (vals[1::3], vals[2::3]):
        merged.add(LatencyHistogram.decode(LatencyHistogram(part).encode()))
    assert merged.summary_ms() == whole.summary_ms()
    assert (merged.count, merged.clamped) == (whole.count, whole.clamped) == (9_000, 2)
    # Averaging per-part percentiles is what this avoids: it differs from the whole's.
    parts = [LatencyHistogram(vals[i::3]).percentile_ms(99.9) for i in range(3)]
    assert whole.percentile_ms(99.9) not in parts


def _sample(i: int, lat: float, ok: bool = True) -> Sample:
    return Sample(request_id=f"r{i}", planned_s=i / 10, lag_s=0.001, latency_s=lat,
                  service_s=lat, model="m", priority="interactive", caller="c", measured=True,
                  outcome=Outcome(status=200) if ok else Outcome(error="Timeout"))


def test_run_histograms_round_trip_and_add() -> None:
    a = [_sample(i, 0.01 * (i + 1)) for i in range(10)]
    b = [_sample(10 + i, 0.5, ok=i % 2 == 0) for i in range(6)]
    merged = RunHistograms.decode(RunHistograms.of(a).encode())
    merged.add(RunHistograms.decode(RunHistograms.of(b).encode()))
    whole = RunHistograms.of(a + b)
    assert merged.latency.summary_ms() == whole.latency.summary_ms()
    assert (merged.latency.count, merged.lag.count) == (13, 16)


async def test_waiting_for_a_lane_is_latency_not_lag() -> None:
    """One lane, 50 ms per call (on a fake clock), three requests planned at once: they queue."""
    clock = TickingClock(tick=1e-6)

    async def slow(req: LoadRequest) -> Outcome:
        clock.advance(0.05)
        await asyncio.sleep(0)
        return Outcome(status=200)

    samples = await run_open_loop(CallableTarget(slow), plan([0.0, 0.0, 0.0]), lanes=1,
                                  clock=clock)
    lat = [s.latency_s for s in samples]
    assert lat == pytest.approx([0.05, 0.10, 0.15], abs=1e-3)
    assert [s.wait_s for s in samples] == pytest.approx([0.0, 0.05, 0.10], abs=1e-3)
    assert [s.service_s for s in samples] == pytest.approx([0.05] * 3, abs=1e-3)
    assert [s.lag_s for s in samples] == pytest.approx([0.0] * 3, abs=1e-3)  # sent on time


async def test_unanswered_requests_end_as_timeouts_in_flight_or_queued() -> None:
    clock = TickingClock(tick=1e-6)
    gate = asyncio.Event()

    async def never(req: LoadRequest) -> Outcome:
        await gate.wait()
        return Outcome(status=200)

    async def time_passes() -> None:  # the fake clock never runs ahead of the loop's
        while True:
            await asyncio.sleep(0.001)
            clock.advance(0.001)

    ticker = asyncio.create_task(time_passes())
    try:
        samples = await run_open_loop(CallableTarget(never), plan([0.0, 0.01, 0.02, 0.03]),
                                      lanes=2, timeout_s=0.2, clock=clock)
    finally:
        ticker.cancel()
    assert [s.outcome.error for s in samples] == ["Timeout"] * 4
    # Expired at their timeout, found by a sweep (every 20 ms of real time, on a fake clock
    # that moves faster): never before it.
    assert all(s.latency_s >= 0.2 for s in samples)
    # The two queued requests got a lane only when the first two expired: that wait is in
    # their latency, and the lane's short remainder is their service time.
    first, queued = samples[:2], samples[2:]
    assert all(s.lag_s == pytest.approx(0.0, abs=1e-3) for s in samples)  # sent on time
    assert all(s.wait_s == pytest.approx(0.0, abs=1e-3) for s in first)
    assert all(q.wait_s >= 0.2 - 0.03 and q.service_s < q.wait_s for q in queued)
    assert all(s.latency_s == pytest.approx(s.lag_s + s.wait_s + s.service_s) for s in samples)


def test_body_encoder_writes_the_v2_body() -> None:
    (item,) = plan([0.0])
    req = LoadRequest("id-1", "digits", item.request.inputs, priority="batch", caller="a",
                      deadline_ms=200.0, version="2")
    raw = BodyEncoder("127.0.0.1", 8000, "/base").encode(req)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /base/v2/models/digits/versions/2/infer HTTP/1.1\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body) == v2_body(req)


def test_response_parsing() -> None:
    assert _parse_head(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 12\r\n"
                       b"Connection: close") == (503, 12, False, True)
    assert _parse_head(b"garbage") is None
    chunked = bytearray(b"xx\r\n\r\n4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n")
    assert _dechunk(chunked, 6) == b"abcdefg"
    assert _dechunk(chunked[:-2], 6) is None
    ok = outcome_of((200, None, json.dumps({"parameters": {
        "degraded": True, "served_by": "rules", "reason": "shed", "cache": "bypass"}}).encode()))
    assert (ok.ok, ok.degraded, ok.served_by, ok.reason, ok.cache) == (
        True, True, "rules", "shed", "bypass")
    assert outcome_of((200, None, b"not json")).error == "bad_response"
    assert outcome_of((503, "http_503", b"")).error == "http_503"
    assert outcome_of(Outcome(error="Timeout")).error == "Timeout"
