"""benchmarks.overload_http's per-level figures: goodput counts model answers within the deadline
only; a late answer and a degraded one are told apart (by the answer's ``reason``); the class
order check counts what was refused unrun (shed, or refused by the device's triage), never a
timeout or a late answer; the body's reason label is read back by the load client; and the
no-op behind Serve's proxy (what the proxy carries at all) is read beside Timeshare's goodput."""

from __future__ import annotations

import argparse
import asyncio
import time

from benchmarks._openloop import Client, _reason, run_open
from benchmarks._proxy_ceiling import ceiling_summary
from benchmarks.overload_http import MIX, _beside_ceiling, level_job, summarize, targets

# [class, latency_s, status, degraded, shed, edge_s, reason]
OK = ["realtime", 0.05, 200, False, False, 0.04, None]


def _answers() -> list[list]:
    return [
        OK, OK,
        ["realtime", 0.01, 503, False, True, None, None],  # shed at the edge
        ["interactive", 0.30, 200, False, False, 0.29, None],
        ["interactive", 0.62, 200, False, False, 0.61, None],  # late
        ["interactive", 0.02, 200, True, False, 0.01, "error: RequestExpired"],  # refused unrun
        ["interactive", 0.50, 200, True, False, 0.49, "timeout"],  # ran out of time: not refused
        ["batch", 0.01, 200, True, True, None, "shed: overload:batch"],  # shed to its fallback
        ["batch", 0.01, 200, True, True, None,  # by the edge, on its deadline
         "shed at the edge: would_miss_deadline: predicted queue delay 812 ms"],
    ]


def test_a_level_tells_late_degraded_and_refused_apart():
    lv = summarize(_answers(), sent=9, seconds=1.0, capacity=4.0, deadline_s=0.5)
    c = lv["classes"]
    assert lv["goodput_rps"] == 3.0  # two realtime and one interactive answer within 0.5 s
    assert lv["goodput_vs_capacity"] == 0.75
    assert c["interactive"]["late"] == 1
    assert c["interactive"]["degraded_reasons"] == {"error: RequestExpired": 1, "timeout": 1}
    assert c["interactive"]["shed"] == 0 and c["interactive"]["refused_share"] == 0.25
    assert c["realtime"]["shed_share"] == c["realtime"]["refused_share"] == round(1 / 3, 3)
    assert c["batch"]["refused_share"] == 1.0
    assert c["batch"]["degraded_reasons"] == {}  # a shed answer is counted as shed only
    # and by the rule that shed it, where its answer names one
    assert c["batch"]["shed_reasons"] == {"pipeline: overload:batch": 1,
                                          "edge: would_miss_deadline": 1}
    assert c["realtime"]["shed_reasons"] == {"?": 1} and c["interactive"]["shed_reasons"] == {}
    # how long the refused-unrun answer took, apart from the served ones and the timeout
    assert c["interactive"]["expired_p50_ms"] == c["interactive"]["expired_p99_ms"] == 20.0
    assert c["realtime"]["expired_p99_ms"] is None


def test_the_class_order_check_fails_when_realtime_is_refused_more_than_interactive():
    answers = _answers()
    answers[3][2:] = [503, False, True, None, None]  # one more interactive refused: 2 of 4 > 1/3
    arm = {"levels": {"1x": summarize(answers, sent=9, seconds=1.0, capacity=4.0,
                                      deadline_s=0.5)}}
    assert targets(arm, 500.0)["1x"]["refused_order_batch_interactive_realtime"]
    arm["levels"]["1x"]["classes"]["realtime"]["refused_share"] = 0.9
    assert not targets(arm, 500.0)["1x"]["refused_order_batch_interactive_realtime"]


def test_the_load_client_reads_a_degraded_answers_reason():
    body = (b'{"model_name":"m","outputs":[],"parameters":{"degraded":true,'
            b'"served_by":"default","reason":"error: RequestExpired"}}')
    assert _reason(body) == "error: RequestExpired"
    assert _reason(b'{"parameters":{"degraded":false,"reason":"x"}}') is None


def test_the_proxy_ceiling_counts_answers_in_time_over_the_sent_and_the_capacity():
    answers = [["interactive", 0.01, 200, False, False, None, None],
               ["interactive", 0.04, 200, False, False, None, None],
               ["interactive", 0.30, 200, False, False, None, None],
               ["interactive", 0.90, 200, False, False, None, None],  # late
               ["interactive", 30.0, 0, False, False, None, None]]  # no answer
    lv = ceiling_summary(answers, seconds=2.0, capacity=1.0, deadline_s=0.5, shed_s=0.05)
    assert lv["sent"] == 5 and lv["answered_200"] == 4
    assert lv["in_deadline_share"] == 0.6 and lv["within_shed_limit_share"] == 0.4
    assert lv["in_deadline_vs_capacity"] == 1.5  # three in time over two seconds, capacity 1/s


def _rt(p99_ms: float | None) -> dict:
    return {"realtime": {"served_p99_ms": p99_ms}}


def test_a_level_the_noop_cannot_carry_is_marked_beside_timeshares_goodput():
    arm = {"levels": {"1x": {"goodput_vs_capacity": 0.96, "classes": _rt(60.0)},
                      "3x": {"goodput_vs_capacity": 0.1, "classes": _rt(300.0)}}}
    ceiling = {"levels": {
        "1x": {"in_deadline_vs_capacity": 0.99, "in_deadline_share": 1.0,
               "within_shed_limit_share": 0.97, "p99_ms": 20.0},
        "3x": {"in_deadline_vs_capacity": 0.8, "in_deadline_share": 0.27,
               "within_shed_limit_share": 0.03, "p99_ms": 140.0}}}
    out = _beside_ceiling({"proxy": arm}, {"proxy": ceiling})["edge_behind_ray_proxy"]
    assert out["1x"]["proxy_carries_level"] and not out["3x"]["proxy_carries_level"]
    assert out["3x"]["timeshare_goodput_vs_capacity"] == 0.1
    assert out["3x"]["noop_in_deadline_share"] == 0.27
    # the realtime bound is Timeshare's 1x p99 + 50 ms: a no-op slower than that at 3x means
    # no app's realtime answers could meet it behind this proxy
    assert out["3x"]["realtime_p99_bound_ms"] == 110.0
    assert out["1x"]["noop_p99_within_realtime_bound"]
    assert not out["3x"]["noop_p99_within_realtime_bound"]
    assert out["3x"]["noop_p99_ms"] == 140.0 and out["3x"]["timeshare_realtime_p99_ms"] == 300.0
    # an arm or a ceiling that did not run is left out, not guessed
    assert _beside_ceiling({"proxy": {"error": "x"}}, {"proxy": ceiling}) == {}


def test_the_load_client_sends_the_class_as_headers_when_asked():
    """``--class-headers``: each request carries its class and deadline as headers too, so the
    edge decides before reading the body; without them the request is as before."""
    client = Client(1, "/v2/models/m/infer")
    plain = client.raw(b"{}")
    headed = client.raw(b"{}", {"Timeshare-Priority": "batch", "Timeshare-Deadline-Ms": "500"})
    assert b"Timeshare-" not in plain
    head, _, body = headed.partition(b"\r\n\r\n")
    assert body == b"{}"
    lines = head.split(b"\r\n")
    assert b"Timeshare-Priority: batch" in lines and b"Timeshare-Deadline-Ms: 500" in lines
    assert b"Content-Length: 2" in lines and lines[0] == b"POST /v2/models/m/infer HTTP/1.1"
    args = argparse.Namespace(class_headers=True, deadline_ms=500.0, seconds=1.0,
                              request_start=False)
    job = level_job(1, 10.0, 2, args=args)
    assert job["headers"]["realtime"] == {"Timeshare-Priority": "realtime",
                                          "Timeshare-Deadline-Ms": "500"}
    assert "headers" not in level_job(1, 10.0, 2, args=argparse.Namespace(
        class_headers=False, deadline_ms=500.0, seconds=1.0, request_start=False))


async def test_the_load_client_stamps_each_request_at_its_planned_instant_when_asked():
    """``--request-start``: every request carries ``X-Request-Start`` (Unix seconds), as a front
    proxy stamps it, between its request line and its other headers, the body intact."""
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                seen.append(head + await reader.readexactly(length))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except asyncio.IncompleteReadError:  # the client closed its keep-alive connection
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    args = argparse.Namespace(class_headers=False, deadline_ms=500.0, seconds=0.5,
                              request_start=True)
    job = {**level_job(port, 40.0, 1, args=args), "path": "/p", "body": {c: '{"x": "%d"}'
                                                                     for c in MIX}}
    sent_from = time.time()
    async with server:
        answers = await run_open(job)
    assert answers and [a[2] for a in answers] == [200] * len(answers) == [200] * len(seen)
    for raw in seen:
        lines = raw.split(b"\r\n")
        assert lines[0] == b"POST /p HTTP/1.1" and lines[1].startswith(b"X-Request-Start: t=")
        assert sent_from < float(lines[1][19:]) < time.time() and raw.endswith(b'{"x": "%d"}')
    job.pop("request_start")
    seen.clear()
    async with await asyncio.start_server(serve, "127.0.0.1", port):
        await run_open(job)
    assert seen and not any(b"X-Request-Start" in raw for raw in seen)


def test_a_levels_device_figures_read_its_forwards_against_the_capacity_runs() -> None:
    """The device's work in one level: its batches, their mean forward, its busy share, and
    that forward over the capacity run's (behind a busy host's proxy each forward stretches,
    and the capacity left to serve shrinks with it)."""
    from benchmarks._device_status import chunks_delta, compute_delta, device_counters
    from benchmarks.overload_http import level_device

    before = {"chunks": 40, "inline_chunks": 0, "inline_waits": 0, "compute_s": 0.8}
    after = {"chunks": 400, "inline_chunks": 0, "inline_waits": 0, "compute_s": 8.72}
    lv = level_device(before, after, seconds=8.0, capacity_forward_ms=20.0)
    assert lv == {"batches": 360, "forward_ms": 22.0, "busy_share": 0.99,
                  "forward_vs_capacity": 1.1}
    # no capacity run to compare with (a Ray-only run), or no batches: no ratio
    assert level_device(before, after, seconds=8.0, capacity_forward_ms=None)[
        "forward_vs_capacity"] is None
    idle = level_device(before, before, seconds=8.0, capacity_forward_ms=20.0)
    assert idle == {"batches": 0, "forward_ms": None, "busy_share": 0.0,
                    "forward_vs_capacity": None}
    # a status that could not be read gives no figures, never made-up ones
    assert level_device(None, after, seconds=8.0, capacity_forward_ms=20.0) is None
    assert compute_delta(before, None, seconds=8.0) is None
    assert chunks_delta(before, after) == {"chunks": 360, "inline_share": 0.0,
                                           "inline_waits": 0}
    assert chunks_delta(before, before)["inline_share"] is None
    assert device_counters(1) is None  # nothing listens on port 1
