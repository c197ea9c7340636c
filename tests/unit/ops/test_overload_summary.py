"""benchmarks.overload_http's per-level figures: goodput counts model answers within the deadline
only; a late answer and a degraded one are told apart (by the answer's ``reason``); the class
order check counts what was refused unrun (shed, or refused by the device's triage), never a
timeout or a late answer; and the body's reason label is read back by the load client."""

from __future__ import annotations

from benchmarks._openloop import _reason
from benchmarks.overload_http import summarize, targets

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
    ]


def test_a_level_tells_late_degraded_and_refused_apart():
    lv = summarize(_answers(), sent=8, seconds=1.0, capacity=4.0, deadline_s=0.5)
    c = lv["classes"]
    assert lv["goodput_rps"] == 3.0  # two realtime and one interactive answer within 0.5 s
    assert lv["goodput_vs_capacity"] == 0.75
    assert c["interactive"]["late"] == 1
    assert c["interactive"]["degraded_reasons"] == {"error: RequestExpired": 1, "timeout": 1}
    assert c["interactive"]["shed"] == 0 and c["interactive"]["refused_share"] == 0.25
    assert c["realtime"]["shed_share"] == c["realtime"]["refused_share"] == round(1 / 3, 3)
    assert c["batch"]["refused_share"] == 1.0
    assert c["batch"]["degraded_reasons"] == {}  # a shed answer is counted as shed only


def test_the_class_order_check_fails_when_realtime_is_refused_more_than_interactive():
    answers = _answers()
    answers[3][2:] = [503, False, True, None, None]  # one more interactive refused: 2 of 4 > 1/3
    arm = {"levels": {"1x": summarize(answers, sent=8, seconds=1.0, capacity=4.0,
                                      deadline_s=0.5)}}
    assert targets(arm, 500.0)["1x"]["refused_order_batch_interactive_realtime"]
    arm["levels"]["1x"]["classes"]["realtime"]["refused_share"] = 0.9
    assert not targets(arm, 500.0)["1x"]["refused_order_batch_interactive_realtime"]


def test_the_load_client_reads_a_degraded_answers_reason():
    body = (b'{"model_name":"m","outputs":[],"parameters":{"degraded":true,'
            b'"served_by":"default","reason":"error: RequestExpired"}}')
    assert _reason(body) == "error: RequestExpired"
    assert _reason(b'{"parameters":{"degraded":false,"reason":"x"}}') is None
