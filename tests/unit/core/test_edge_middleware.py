"""router.edge.EdgeMiddleware over a recording ASGI app, with a fake clock (no server)."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from policies.edge import EdgeConfig
from policies.priority import Priority
from router.edge import (
    ARRIVAL_KEY,
    SHED_KEY,
    USED_BACKEND_KEY,
    EdgeGate,
    EdgeMiddleware,
    EdgeSettings,
)
from router.errors import Overloaded, ServiceUnavailable
from router.loop_load import LoopLoad
from router.schemas import InferenceRequest, InferenceResponse, Timings
from tests.support.clocks import FakeClock

PATH = "/v2/models/m/infer"


class App:
    """Answers 200 with the body it read; ``hold`` keeps requests in flight until set."""

    def __init__(self) -> None:
        self.seen: list[tuple[dict, bytes]] = []
        self.hold = asyncio.Event()
        self.hold.set()

    async def __call__(self, scope, receive, send) -> None:
        msg = await receive()
        self.seen.append((scope, msg["body"]))
        await self.hold.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def _scope(body_len: int | None, headers: dict[str, str] | None = None, path: str = PATH):
    h = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if body_len is not None:
        h.append((b"content-length", str(body_len).encode()))
    return {"type": "http", "method": "POST", "path": path, "headers": h}


async def _call(mw, scope, chunks, *, gap: float = 0.0):
    queue = list(chunks)
    sent: list[dict] = []

    async def receive():
        if not queue:
            await asyncio.sleep(3600)
        if gap and len(queue) < len(chunks):  # the first chunk comes at once
            await asyncio.sleep(gap)
        body = queue.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(queue)}

    async def send(m):
        sent.append(m)

    await mw(scope, receive, send)
    status = sent[0]["status"]
    headers = dict(sent[0]["headers"])
    return status, headers, b"".join(m.get("body", b"") for m in sent[1:])


def _mw(**kw):
    clock = FakeClock(100.0)
    app = App()
    adm = kw.pop("admission", {})
    mw = EdgeMiddleware(app, settings=EdgeSettings(admission=EdgeConfig(**adm), **kw),
                        max_body_bytes=1000, default_deadline_ms=500, clock=clock)
    return mw, app, clock


async def test_admitted_request_sees_the_whole_body_and_its_arrival_time() -> None:
    mw, app, clock = _mw()
    status, _, _ = await _call(mw, _scope(None), [b'{"in', b'puts": []}'])
    assert status == 200
    scope, body = app.seen[0]
    assert body == b'{"inputs": []}' and scope[ARRIVAL_KEY] == clock()
    assert sum(mw.state.in_flight.values()) == 0


TIGHT = {"max_queue_delay_s": {
    "realtime": 0.09, "interactive": 0.09, "batch": 0.06, "background": 0.04}}


async def _batch_behind_held_interactive(mw, app):
    """Hold four interactive requests in the backend, then send one batch request: the
    held tasks, the batch body, and the batch request's (status, headers, payload)."""
    app.hold.clear()
    held = [asyncio.create_task(_call(mw, _scope(None, {"Timeshare-Priority": "interactive"}),
                                      [b"{}"])) for _ in range(4)]
    await asyncio.sleep(0.01)
    body = b'{"parameters": {"priority": "batch"}, "inputs": []}'
    return held, body, await _call(mw, _scope(len(body)), [body])


async def test_overload_sheds_batch_with_503_retry_after_and_the_error_shape() -> None:
    mw, app, _ = _mw(initial_service_s=0.02, admission=TIGHT, shed_to_fallback=False)
    held, body, (status, headers, payload) = await _batch_behind_held_interactive(mw, app)
    assert status == 503 and headers[b"retry-after"] == b"1"
    err = json.loads(payload)
    assert err["type"] == "Overloaded" and err["field"] == "priority"
    assert err["error"].startswith("overload:batch")
    # realtime waits only behind the one request running: let through
    held.append(asyncio.create_task(_call(mw, _scope(None, {"X-Priority": "0"}), [b"{}"])))
    await asyncio.sleep(0.01)
    assert mw.state.in_flight[Priority.REALTIME] == 1
    app.hold.set()
    assert [s for s, _, _ in await asyncio.gather(*held)] == [200] * 5
    assert mw.state.counts == {"shed:batch": 1}


async def test_class_and_deadline_as_headers_are_decided_before_the_body_is_read() -> None:
    """Both as headers: a refusal does not wait for the body (behind Serve's proxy it is a call
    back to the proxy away), a size the headers break is still a 413 first, and an admitted
    request is read and served as before."""
    mw, app, _ = _mw(initial_service_s=0.02, admission=TIGHT, shed_to_fallback=False)
    held, _, _ = await _batch_behind_held_interactive(mw, app)
    reads: list[int] = []
    sent: list[dict] = []

    async def receive():
        reads.append(1)
        await asyncio.sleep(3600)  # a body that never comes

    async def send(m):
        sent.append(m)

    both = {"Timeshare-Priority": "batch", "Timeshare-Deadline-Ms": "500"}
    await asyncio.wait_for(mw(_scope(40, both), receive, send), 1.0)
    assert sent[0]["status"] == 503 and reads == []
    assert json.loads(sent[1]["body"])["error"].startswith("overload:batch")
    status, _, payload = await _call(mw, _scope(5000, both), [b"x"])
    assert status == 413 and json.loads(payload)["field"] == "body"
    status, _, payload = await _call(
        mw, _scope(None, {**both, "Timeshare-Priority": "urgent"}), [b"{}"])
    assert status == 400 and json.loads(payload)["field"] == "Timeshare-Priority"
    app.hold.set()
    await asyncio.gather(*held)
    body = b'{"parameters": {"priority": "batch"}, "inputs": []}'  # the headers win
    status, _, _ = await _call(mw, _scope(len(body), {**both, "X-Priority": "0",
                                                      "Timeshare-Priority": ""}), [body])
    assert status == 200 and app.seen[-1][1] == body


async def test_a_burst_passes_the_in_flight_share_until_it_has_stood_a_window() -> None:
    """A pile-up on an idle edge (a pause of the host) is let through up to twice the share;
    the same backlog, once it has stood for a whole window, sheds at the share."""
    mw, app, clock = _mw(admission={"max_in_flight": 8}, shed_to_fallback=False)
    app.hold.clear()

    async def batch():
        body = b'{"parameters": {"priority": "batch"}, "inputs": []}'
        return await _call(mw, _scope(len(body)), [body])

    held = [asyncio.create_task(batch()) for _ in range(9)]  # batch's share is 4, a burst 8
    await asyncio.sleep(0.01)
    assert mw.state.total == 8 and mw.state.counts == {"shed:batch": 1}
    clock.advance(0.25)  # the 8 have now stood through a whole window
    status, _, payload = await batch()
    assert status == 503 and json.loads(payload)["error"].startswith("overload:batch")
    app.hold.set()
    assert sorted(s for s, _, _ in await asyncio.gather(*held)) == [200] * 8 + [503]


async def test_the_class_is_read_from_the_raw_body_realtime_included() -> None:
    mw, app, _ = _mw()
    app.hold.clear()
    tasks = [asyncio.create_task(_call(mw, _scope(None), [
        b'{"parameters": {"priority": "%s"}, "inputs": []}' % p.label.encode()]))
        for p in Priority]
    tasks.append(asyncio.create_task(_call(mw, _scope(None), [b'{"inputs": []}'])))
    await asyncio.sleep(0.01)
    assert mw.state.in_flight == {Priority.REALTIME: 1, Priority.INTERACTIVE: 2,
                                  Priority.BATCH: 1, Priority.BACKGROUND: 1}
    app.hold.set()
    await asyncio.gather(*tasks)


async def test_size_depth_and_bad_priority_are_refused_before_the_app_runs() -> None:
    mw, app, _ = _mw(max_json_depth=4)
    status, _, payload = await _call(mw, _scope(5000), [b"x"])
    assert status == 413 and json.loads(payload)["field"] == "body"
    status, _, payload = await _call(mw, _scope(None), [b"[[[", b"[[[]]]]]]"])
    assert status == 400 and "deeper than 4" in json.loads(payload)["error"]
    status, _, payload = await _call(mw, _scope(None, {"Timeshare-Priority": "urgent"}), [b"{}"])
    assert status == 400 and json.loads(payload)["field"] == "Timeshare-Priority"
    assert app.seen == []


async def test_slow_body_is_cut_and_readers_are_bounded() -> None:
    mw, _, _ = _mw(max_body_readers=1,
                   admission={"body_grace_s": 0.05, "body_timeout_s": 0.2})
    slow = asyncio.create_task(_call(mw, _scope(None), [b"{", b"}"], gap=10))
    await asyncio.sleep(0.01)  # the first chunk arrives at once, the second never in time
    assert mw.state.readers == 1
    status, _, payload = await _call(mw, _scope(None), [b"{", b"}"])
    assert status == 503 and "slow uploads" in json.loads(payload)["error"]
    status, _, _ = await _call(mw, _scope(None), [b"{}"])  # one piece: needs no reader slot
    assert status == 200
    status, _, payload = await slow
    assert status == 408 and json.loads(payload)["type"] == "RequestTimeout"
    assert mw.state.readers == 0


async def test_disabled_edge_passes_everything_through() -> None:
    mw, app, _ = _mw(enabled=False)
    status, _, _ = await _call(mw, _scope(5000), [b"{}"])
    assert status == 200 and ARRIVAL_KEY not in app.seen[0][0]


def test_service_time_is_measured_from_completions() -> None:
    mw, _, clock = _mw(initial_service_s=0.5)
    st = mw.state
    st.started(Priority.BATCH)
    st.started(Priority.BATCH)
    clock.advance(0.02)
    st.finished(Priority.BATCH, 100.0)  # ran alone from the start: 20 ms
    clock.advance(0.01)
    st.finished(Priority.BATCH, 100.0)  # 10 ms after the previous completion
    assert st.service_s == pytest.approx(0.5 + 0.1 * (0.02 - 0.5) + 0.1 * (0.01 - 0.452))
    # two batch admissions at t=100.0 (tau 1 s), seen 30 ms later
    assert st.snapshot().admitted_rate[Priority.BATCH] == pytest.approx(2 * math.exp(-0.03))
    assert st.snapshot().admitted_rate[Priority.REALTIME] == 0.0


class TimedApp(App):
    """Takes ``took_s`` of the fake clock per answer and says whether the backend computed it
    (False: a cache hit, or the pool refused it and its fallback answered)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.took_s = 0.0
        self.used_backend = True

    async def __call__(self, scope, receive, send) -> None:
        self.clock.advance(self.took_s)
        scope[USED_BACKEND_KEY] = self.used_backend
        await super().__call__(scope, receive, send)


async def test_only_answers_the_backend_computed_teach_the_service_time() -> None:
    # Under overload the pool refuses what it cannot serve in time and its fallback answers at
    # once; cache hits answer in microseconds. Counting those gaps took the edge's service time
    # to a fraction of the model's, and the edge let through what could not be served in time.
    clock = FakeClock(100.0)
    app = TimedApp(clock)
    mw = EdgeMiddleware(app, settings=EdgeSettings(initial_service_s=0.02),
                        max_body_bytes=1000, default_deadline_ms=500, clock=clock)
    body = b'{"inputs": []}'
    app.took_s, app.used_backend = 0.0001, False
    for _ in range(20):
        assert (await _call(mw, _scope(len(body)), [body]))[0] == 200
    assert mw.state.service_s == 0.02  # unchanged by 20 answers that did not use the backend
    app.took_s, app.used_backend = 0.0001, True
    assert (await _call(mw, _scope(len(body)), [body]))[0] == 200
    assert mw.state.service_s == pytest.approx(0.02 + 0.1 * (0.0001 - 0.02))
    assert mw.state.total == 0


class FallbackApp(App):
    """A shed request (SHED_KEY on its scope) is answered at once: 200 (its fallback) or 503
    (none); admitted ones wait on ``hold`` like App's."""

    def __init__(self, shed_status: int) -> None:
        super().__init__()
        self.shed_status = shed_status

    async def __call__(self, scope, receive, send) -> None:
        if SHED_KEY not in scope:
            await super().__call__(scope, receive, send)
            return
        msg = await receive()
        self.seen.append((scope, msg["body"]))
        await send({"type": "http.response.start", "status": self.shed_status, "headers": []})
        await send({"type": "http.response.body", "body": b"fallback"})


@pytest.mark.parametrize("shed_status, retry_after", [(200, None), (503, b"1")])
async def test_a_shed_request_goes_on_to_its_fallback_without_occupying_the_backend(
        shed_status, retry_after) -> None:
    clock = FakeClock(100.0)
    app = FallbackApp(shed_status)
    mw = EdgeMiddleware(app, settings=EdgeSettings(initial_service_s=0.02,
                                                   admission=EdgeConfig(**TIGHT)),
                        max_body_bytes=1000, default_deadline_ms=500, clock=clock)
    held, body, (status, headers, payload) = await _batch_behind_held_interactive(mw, app)
    assert (status, headers.get(b"retry-after"), payload) == (shed_status, retry_after,
                                                               b"fallback")
    scope, seen_body = app.seen[-1]
    assert scope[SHED_KEY].startswith("shed at the edge: overload:batch") and seen_body == body
    assert mw.state.in_flight[Priority.BATCH] == 0  # never counted as backend work
    assert mw.state.counts == {"shed:batch": 1}
    app.hold.set()
    assert [s for s, _, _ in await asyncio.gather(*held)] == [200] * 4


class FixedLoad(LoopLoad):
    """The loop's busy share as the test sets it (measured in test_loop_load)."""

    def __init__(self, busy: float) -> None:
        super().__init__()
        self.busy = busy

    def touch(self) -> None:
        pass


@pytest.mark.parametrize("busy, status", [(0.5, 200), (0.95, 503)])
async def test_a_shed_request_gets_its_fallback_only_while_the_ingress_loop_has_cpu_to_spare(
        busy, status) -> None:
    """Past fallback_max_loop_busy the ingress's CPU is the bottleneck: a fallback answer
    would cost the admitted requests about half a model answer each, so it is a 503."""
    app = FallbackApp(200)
    mw = EdgeMiddleware(app, settings=EdgeSettings(initial_service_s=0.02,
                                                   admission=EdgeConfig(**TIGHT)),
                        max_body_bytes=1000, default_deadline_ms=500, clock=FakeClock(100.0),
                        loop_load=FixedLoad(busy))
    held, _, (got, headers, payload) = await _batch_behind_held_interactive(mw, app)
    assert (got, headers.get(b"retry-after")) == (status, None if status == 200 else b"1")
    if status == 503:
        assert json.loads(payload)["type"] == "Overloaded"
        assert len(app.seen) == 4  # the shed request never reached the app
    assert mw.state.counts == {"shed:batch": 1}
    app.hold.set()
    await asyncio.gather(*held)


def _gate_request(priority: Priority) -> InferenceRequest:
    return InferenceRequest(model="m", inputs={"x": [[1.0]]}, priority=priority)


def _answer_with(clock: FakeClock, compute_ms: float, seen: list):
    async def answer(req: InferenceRequest) -> InferenceResponse:
        seen.append(req.shed_reason)
        clock.advance(0.01)
        return InferenceResponse(request_id="r", model="m", outputs={}, served_by="m",
                                 timings=Timings(compute_ms=compute_ms))
    return answer


async def test_the_gate_runs_a_decoded_request_as_the_http_edge_does() -> None:
    # The gRPC service and the handle API go through EdgeGate.run: admitted (counted in
    # flight, a backend answer teaches the service time), shed (marked, its fallback answers;
    # with none, Overloaded with the retry hint) or refused (Overloaded, nothing runs).
    clock = FakeClock(100.0)
    gate = EdgeGate(EdgeSettings(initial_service_s=0.02), clock=clock)
    seen: list = []
    resp = await gate.run(_gate_request(Priority.BATCH), elapsed_s=0.0, deadline_s=0.5,
                          answer=_answer_with(clock, 5.0, seen))
    assert resp.served_by == "m" and seen == [None] and gate.state.total == 0
    assert gate.state.service_s == pytest.approx(0.02 + 0.1 * (0.01 - 0.02))
    await gate.run(_gate_request(Priority.BATCH), elapsed_s=0.0, deadline_s=0.5,
                   answer=_answer_with(clock, 0.0, seen))  # a cache hit: not a sample
    assert gate.state.service_s == pytest.approx(0.02 + 0.1 * (0.01 - 0.02))

    gate.state.in_flight[Priority.BATCH] = gate.state.total = 100
    await gate.run(_gate_request(Priority.BATCH), elapsed_s=0.0, deadline_s=0.5,
                   answer=_answer_with(clock, 0.0, seen))
    assert seen[-1] is not None and seen[-1].startswith("shed at the edge: overload:batch")

    async def no_fallback(req: InferenceRequest) -> InferenceResponse:
        raise ServiceUnavailable("no local fallback")
    with pytest.raises(Overloaded) as e:
        await gate.run(_gate_request(Priority.BATCH), elapsed_s=0.0, deadline_s=0.5,
                       answer=no_fallback)
    assert e.value.field == "priority" and e.value.retry_after_s >= 1

    refusing = EdgeGate(EdgeSettings(initial_service_s=0.02, shed_to_fallback=False),
                        clock=clock)
    refusing.state.in_flight[Priority.BATCH] = refusing.state.total = 100
    calls = len(seen)
    with pytest.raises(Overloaded, match="overload:batch"):
        await refusing.run(_gate_request(Priority.BATCH), elapsed_s=0.0, deadline_s=0.5,
                           answer=_answer_with(clock, 5.0, seen))
    assert len(seen) == calls  # nothing ran


async def test_the_gate_streams_a_call_in_flight_until_its_last_answer() -> None:
    clock = FakeClock(100.0)
    gate = EdgeGate(EdgeSettings(initial_service_s=0.02), clock=clock)
    totals: list[int] = []

    async def two_answers(req: InferenceRequest):
        for compute_ms in (1.0, 2.0):
            totals.append(gate.state.total)
            clock.advance(0.01)
            yield InferenceResponse(request_id="r", model="m", outputs={}, served_by="m",
                                    timings=Timings(compute_ms=compute_ms))

    got = [r async for r in gate.stream(_gate_request(Priority.INTERACTIVE), elapsed_s=0.0,
                                        deadline_s=0.5, answers=two_answers)]
    assert len(got) == 2 and totals == [1, 1] and gate.state.total == 0
    assert gate.state.service_s == pytest.approx(0.02 + 0.1 * (0.02 - 0.02))
    gate.state.in_flight[Priority.BATCH] = gate.state.total = 100
    shed = [r async for r in gate.stream(_gate_request(Priority.BATCH), elapsed_s=0.0,
                                         deadline_s=0.5, answers=two_answers)]
    assert len(shed) == 2 and gate.state.total == 100  # shed: not counted in flight


def _stamped_mw(**kw):
    """An edge whose wall clock reads Unix time 1_800_000_000.0 while its monotonic one reads
    100.0."""
    clock = FakeClock(100.0)
    app = App()
    mw = EdgeMiddleware(app, settings=EdgeSettings(**kw), max_body_bytes=1000,
                        default_deadline_ms=500, clock=clock, wall_clock=lambda: 1.8e9)
    return mw, app, clock


async def test_a_front_proxys_stamp_starts_the_deadline_before_arrival() -> None:
    """``X-Request-Start``: the wait in front of the edge counts against the deadline; the
    body's read and Server-Timing's ``edge`` still run from arrival here."""
    mw, app, clock = _stamped_mw(initial_service_s=0.02, shed_to_fallback=False)
    status, headers, _ = await _call(mw, _scope(None, {"X-Request-Start": "t=1799999999900"}),
                                     [b"{}"])  # 100 ms in front (ms since the epoch)
    assert status == 200
    assert app.seen[-1][0][ARRIVAL_KEY] == pytest.approx(clock() - 0.1)
    assert headers[b"server-timing"] == b"edge;dur=0.00"
    # four interactive requests in flight (20 ms each): one more that waited 450 ms in front
    # cannot make its 500 ms deadline behind them and is refused; unstamped, it could
    app.hold.clear()
    held = [asyncio.create_task(_call(mw, _scope(None), [b"{}"])) for _ in range(4)]
    await asyncio.sleep(0.01)
    status, _, payload = await _call(mw, _scope(None, {"X-Request-Start": "1799999999.55"}),
                                     [b"{}"])
    assert status == 503 and json.loads(payload)["error"].startswith("would_miss_deadline")
    held.append(asyncio.create_task(_call(mw, _scope(None), [b"{}"])))
    await asyncio.sleep(0.01)
    assert mw.state.total == 5
    app.hold.set()
    assert [s for s, _, _ in await asyncio.gather(*held)] == [200] * 5
    # past its deadline already: let through to its labelled fallback (the policy's rule for
    # a deadline no idle backend could meet), which its start tells to answer at once
    status, _, _ = await _call(mw, _scope(None, {"X-Request-Start": "1799999999.4"}), [b"{}"])
    assert status == 200 and app.seen[-1][0][ARRIVAL_KEY] == pytest.approx(clock() - 0.6)


@pytest.mark.parametrize("stamp", ["t=1800000000.25", "t=soon", "t=1799999960", "", "t=-5"])
async def test_a_stamp_from_the_future_or_unusable_costs_the_request_nothing(stamp) -> None:
    """A clock behind (the future) is no wait; one that does not parse or is older than
    ``request_start_max_age_s`` (30 s) is ignored and counted, never refused."""
    mw, app, clock = _stamped_mw()
    status, _, _ = await _call(mw, _scope(None, {"X-Request-Start": stamp}), [b"{}"])
    assert status == 200 and app.seen[0][0][ARRIVAL_KEY] == clock()
    ignored = {} if stamp == "t=1800000000.25" else {"request_start:ignored": 1}
    assert mw.state.counts == ignored


async def test_the_stamp_is_not_read_when_the_settings_say_so() -> None:
    mw, app, clock = _stamped_mw(request_start=False)
    status, _, _ = await _call(mw, _scope(None, {"X-Request-Start": "t=1799999999"}), [b"{}"])
    assert status == 200 and app.seen[0][0][ARRIVAL_KEY] == clock()
    assert mw.state.counts == {}
