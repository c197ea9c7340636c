"""policies.edge and router.edge_body: pure decisions and raw-body looks (no server)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from policies.edge import (
    EdgeConfig,
    EdgeSnapshot,
    admits_at_once,
    body_wait_s,
    decide_edge,
    predicted_delay_s,
)
from policies.priority import Priority
from router.edge_body import SNIFF_BYTES, DepthScanner, sniff_deadline_ms, sniff_priority

RT, IA, BA, BG = Priority.REALTIME, Priority.INTERACTIVE, Priority.BATCH, Priority.BACKGROUND


TIGHT = {"realtime": 0.09, "interactive": 0.09, "batch": 0.06, "background": 0.04}


def _decide(in_flight, priority, *, service_s=0.02, elapsed_s=0.0, deadline_s=0.5, **cfg):
    cfg.setdefault("max_queue_delay_s", TIGHT)
    return decide_edge(EdgeSnapshot(in_flight, service_s), priority=priority,
                       elapsed_s=elapsed_s, deadline_s=deadline_s, config=EdgeConfig(**cfg))


def test_predicted_delay_counts_work_at_least_as_urgent_plus_the_running_one() -> None:
    snap = EdgeSnapshot({RT: 1, IA: 2, BA: 3}, service_s=0.01)
    assert predicted_delay_s(snap, RT) == pytest.approx(0.02)  # 1 realtime + 1 running below
    assert predicted_delay_s(snap, IA) == pytest.approx(0.04)
    assert predicted_delay_s(snap, BA) == pytest.approx(0.06)
    assert predicted_delay_s(snap, BG) == pytest.approx(0.06)
    assert predicted_delay_s(EdgeSnapshot({}, 0.01), BA) == 0.0


def test_lower_classes_are_shed_first_as_load_grows() -> None:
    """At every load level, the set of shed classes is a suffix of the priority order."""
    for n in range(40):
        load = {RT: n // 4, IA: n // 2, BA: n - n // 4 - n // 2}
        admitted = [_decide(load, p).admit for p in Priority]
        assert admitted == sorted(admitted, reverse=True), (n, admitted)
    # and there is a load where batch is shed but realtime is not
    assert not _decide({IA: 4}, BA).admit and _decide({IA: 4}, RT).admit


def test_more_urgent_traffic_arriving_stretches_the_wait_of_less_urgent_classes() -> None:
    """M/G/1 priority factor: realtime admitted at 40/s x 20 ms fills 80 % of the backend, so
    interactive waits 1 / 0.2 = 5x its queue; realtime itself is not affected."""
    busy = EdgeSnapshot({RT: 1, IA: 1}, 0.02, {RT: 40.0})
    idle = EdgeSnapshot({RT: 1, IA: 1}, 0.02, {})
    assert predicted_delay_s(busy, IA) == pytest.approx(5 * predicted_delay_s(idle, IA))
    assert predicted_delay_s(busy, RT) == predicted_delay_s(idle, RT)
    assert predicted_delay_s(EdgeSnapshot({IA: 1}, 0.02, {RT: 1000.0}), IA) == pytest.approx(0.4)
    cfg = EdgeConfig(max_queue_delay_s=TIGHT)
    assert decide_edge(idle, priority=IA, elapsed_s=0, deadline_s=0.5, config=cfg).admit
    assert not decide_edge(busy, priority=IA, elapsed_s=0, deadline_s=0.5, config=cfg).admit
    assert decide_edge(busy, priority=RT, elapsed_s=0, deadline_s=0.5, config=cfg).admit


def test_overload_reason_and_retry_after() -> None:
    d = _decide({BA: 30}, BA, service_s=0.1)
    assert not d.admit and d.reason == "overload:batch" and d.status == 503
    assert d.retry_after_s == 3  # 30 in flight x 0.1 s drains in 3 s
    assert _decide({}, BA).retry_after_s == 1


def test_in_flight_share_caps_each_class() -> None:
    cfg = {"max_in_flight": 8}
    assert not _decide({RT: 4}, BA, service_s=0.0, **cfg).admit  # 4 >= 0.5 x 8
    assert _decide({RT: 4}, IA, service_s=0.0, **cfg).admit
    assert not _decide({RT: 8}, RT, service_s=0.0, **cfg).admit


def test_a_burst_on_a_short_backlog_may_pass_the_share_a_standing_one_may_not() -> None:
    cfg = {"max_in_flight": 8}  # batch's share: 4 in flight; a burst: 8

    def decide(total: int, standing: int | None):
        snap = EdgeSnapshot({RT: total}, 0.0, standing=standing)
        return decide_edge(snap, priority=BA, elapsed_s=0, deadline_s=0.5,
                           config=EdgeConfig(max_queue_delay_s=TIGHT, **cfg))

    assert decide(5, standing=1).admit  # the queue was short a moment ago: a burst
    assert decide(7, standing=1).admit
    assert not decide(8, standing=1).admit  # burst_factor 2 x the share
    assert not decide(5, standing=2).admit  # half the share stood for a window: overload
    assert not decide(5, standing=None).admit  # unknown: every backlog stands
    one = EdgeConfig(max_queue_delay_s=TIGHT, burst_factor=1.0, **cfg)
    assert not decide_edge(EdgeSnapshot({RT: 4}, 0.0, standing=0), priority=BA, elapsed_s=0,
                           deadline_s=0.5, config=one).admit
    with pytest.raises(ValueError, match="burst_factor"):
        EdgeConfig(burst_factor=0.5)


def test_the_backlog_stands_once_it_has_lasted_a_whole_window() -> None:
    from router.edge_state import StandingBacklog

    now = [0.0]
    b = StandingBacklog(0.1, clock=lambda: now[0])
    for n in range(1, 31):  # a burst of 30 in 10 ms, on an idle backend
        now[0] += 0.0003
        b.update(n)
    assert b.value() == 0
    for n in range(29, 2, -1):  # drained within the window: it never stood
        now[0] += 0.001
        b.update(n)
    now[0] = 0.15
    assert b.value() == 0  # the window before (0-0.1 s) saw the idle start
    b.update(30)
    now[0] = 0.25
    assert b.value() == 3  # the whole window 0.1-0.2 s never went under 3
    now[0] = 0.45  # 30 held since 0.15 s, through whole windows
    assert b.value() == 30
    b.update(0)
    assert b.value() == 0
    with pytest.raises(ValueError, match="window_s"):
        StandingBacklog(0.0)


def test_a_request_that_cannot_meet_its_deadline_is_shed_at_once() -> None:
    d = _decide({RT: 1}, RT, service_s=0.02, elapsed_s=0.47, deadline_s=0.5)
    assert not d.admit and d.reason == "would_miss_deadline"
    assert _decide({RT: 1}, RT, service_s=0.02, elapsed_s=0.40, deadline_s=0.5).admit


def test_config_rejects_missing_classes_and_bad_values() -> None:
    with pytest.raises(ValueError, match="in_flight_share"):
        EdgeConfig(in_flight_share={"realtime": 1.0})
    with pytest.raises(ValueError, match="max_queue_delay_s"):
        EdgeConfig(max_queue_delay_s={"realtime": 0, "interactive": 1, "batch": 1,
                                      "background": 1})
    with pytest.raises(ValueError, match="must not grow"):
        EdgeConfig(max_queue_delay_s={"realtime": 0.05, "interactive": 0.1, "batch": 0.01,
                                      "background": 0.01})
    with pytest.raises(ValueError, match="must not grow"):  # among the classes that set one
        EdgeConfig(max_queue_delay_s={"realtime": 0.05, "interactive": None, "batch": 0.1,
                                      "background": None})
    with pytest.raises(ValueError, match="while realtime has none"):
        EdgeConfig(max_queue_delay_s={"realtime": None, "interactive": 0.1, "batch": None,
                                      "background": None})
    EdgeConfig(max_queue_delay_s={"realtime": 0.1, "interactive": None, "batch": 0.05,
                                  "background": None})  # allowed: interactive has none
    with pytest.raises(ValueError, match="body_grace_s"):
        EdgeConfig(body_grace_s=5, body_timeout_s=1)


def test_body_wait_grace_then_minimum_rate_then_total_timeout() -> None:
    cfg = EdgeConfig(body_grace_s=1.0, body_min_rate_bps=1000.0, body_timeout_s=10.0)
    assert body_wait_s(received=0, elapsed_s=0.0, config=cfg) == 1.0
    assert body_wait_s(received=0, elapsed_s=1.0, config=cfg) <= 0  # nothing after the grace
    assert body_wait_s(received=3000, elapsed_s=2.0, config=cfg) == pytest.approx(1.0)
    assert body_wait_s(received=10**9, elapsed_s=9.5, config=cfg) == pytest.approx(0.5)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 16])
def test_depth_scanner_matches_json_depth_across_chunks(chunk: int) -> None:
    doc = {"a": [[1, 2, {"s": "[[[[[[[[[[", "t": "\\\"[[[[[[[[[[\\\\"}]], "b": "}}}}"}
    raw = json.dumps(doc).encode()  # true depth: {, [, [, { = 4
    for limit, ok in ((4, True), (3, False)):
        s = DepthScanner(limit)
        results = [s.feed(raw[i:i + chunk]) for i in range(0, len(raw), chunk)]
        assert all(results) is ok, (limit, chunk)
    s = DepthScanner(4)
    assert all(s.feed(raw[i:i + chunk]) for i in range(0, len(raw), chunk)) and s.depth == 0


@pytest.mark.parametrize("limit", [3, 4, 5, 40])
def test_depth_scanner_last_chunk_shortcut_agrees_with_the_scan(limit: int) -> None:
    # Brackets in strings make the count (24) overshoot the true depth (4): the shortcut may
    # only skip the scan when even the overcount fits, never decide a refusal by itself.
    raw = json.dumps({"a": [[{"s": "[[[[[[[[[[", "t": "{{{{{{{{{{"}]]}).encode()
    assert DepthScanner(limit).feed(raw, last=True) is DepthScanner(limit).feed(raw) is (
        limit >= 4)
    deep = b"[" * 6 + b"]" * 6
    assert DepthScanner(5).feed(deep, last=True) is False


def test_depth_scanner_refuses_deep_nesting_early() -> None:
    s = DepthScanner(32)
    body = b"[" * 1_000_000 + b"]" * 1_000_000
    assert s.feed(body[:65536]) is False


def test_sniff_priority_and_deadline_in_bounded_windows() -> None:
    head = b'{"parameters": {"priority": "realtime", "deadline_ms": 250}, "inputs": []}'
    assert sniff_priority(head) is RT and sniff_deadline_ms(head) == 250.0
    tail = b'{"inputs": [' + b"1," * SNIFF_BYTES * 2 + b'1], "parameters": {"priority": 2}}'
    assert sniff_priority(tail) is BA
    middle = (b'{"inputs": [' + b"1," * SNIFF_BYTES + b'1], "parameters": {"priority": "batch"}, '
              b'"x": [' + b"1," * SNIFF_BYTES + b"1]}")
    assert sniff_priority(middle) is None  # outside the windows: the default class applies
    assert sniff_priority(b'{"parameters": {"priority": "urgent"}}') is None
    assert sniff_deadline_ms(b'{"parameters": {"deadline_ms": 0}}') is None


def test_a_deadline_too_tight_even_when_idle_goes_on_to_its_fallback() -> None:
    # No queue: shedding would not help it; the pipeline answers with the labelled fallback.
    d = _decide({}, RT, service_s=0.02, elapsed_s=0.0, deadline_s=0.001)
    assert d.admit and d.predicted_delay_s == 0.0
    # A deadline an idle backend would meet but this queue would not is shed at once.
    loose = {"realtime": 1.0, "interactive": 1.0, "batch": 1.0, "background": 1.0}
    d = _decide({RT: 4}, RT, service_s=0.02, elapsed_s=0.0, deadline_s=0.1,
                max_queue_delay_s=loose)
    assert not d.admit and d.reason == "would_miss_deadline"


_SORTED4 = st.lists(st.floats(0.01, 1.0), min_size=4, max_size=4).map(
    lambda v: sorted(v, reverse=True))  # realtime's ceiling highest, as the config requires


@st.composite
def _ceilings(draw) -> list[float | None]:
    """Latency objectives as the config allows them: non-increasing among the classes that set
    one, any class but realtime (while another sets one) without (None: the deadline alone)."""
    values: list[float | None] = list(draw(_SORTED4))
    for i in range(1, 4):
        if draw(st.booleans()):
            values[i] = None
    if draw(st.booleans()) and all(v is None for v in values[1:]):
        values[0] = None
    return values


def _edge_config(max_in_flight, shares, ceilings, burst) -> EdgeConfig:
    labels = [p.label for p in Priority]
    return EdgeConfig(max_in_flight=max_in_flight, burst_factor=burst,
                      in_flight_share=dict(zip(labels, shares, strict=True)),
                      max_queue_delay_s=dict(zip(labels, ceilings, strict=True)))


@st.composite
def _at_once_case(draw):
    """A config, a snapshot and a request inside admits_at_once's documented condition: fewer
    in flight than the class's share, and the worst-case delay within its ceiling and the
    request's budget (every such case, none outside it)."""
    cfg = _edge_config(draw(st.integers(1, 64)), draw(_SORTED4), draw(_ceilings()),
                       draw(st.floats(1.0, 3.0)))
    priority = draw(st.sampled_from(list(Priority)))
    share = cfg.max_in_flight * cfg.in_flight_share[priority.label]
    total = draw(st.integers(0, max(0, math.ceil(share) - 1)))
    assume(total < share)
    cut = sorted(draw(st.lists(st.integers(0, total), min_size=3, max_size=3)))
    in_flight = [b - a for a, b in zip([0, *cut], [*cut, total], strict=True)]
    ceiling = cfg.max_queue_delay_s[priority.label]
    most_s = (1.0 if ceiling is None else ceiling) * 0.05 / (total + 1)
    service_s = draw(st.floats(0.0, most_s))
    worst = (total + 1) * service_s / 0.05
    assume(ceiling is None or worst <= ceiling)
    elapsed_s = draw(st.floats(0.0, 1.0))
    floor_s = elapsed_s + service_s + cfg.deadline_margin_s + worst
    deadline_s = floor_s + draw(st.floats(0.0, 2.0))
    assume(deadline_s >= floor_s)
    rates = draw(st.lists(st.floats(0.0, 500.0), min_size=4, max_size=4))
    standing = draw(st.one_of(st.none(), st.integers(0, 80)))
    snap = EdgeSnapshot(dict(zip(Priority, in_flight, strict=True)), service_s,
                        dict(zip(Priority, rates, strict=True)), standing=standing)
    return cfg, snap, priority, elapsed_s, deadline_s


@settings(max_examples=300, deadline=None)
@given(case=_at_once_case())
def test_admits_at_once_where_its_condition_holds_and_the_full_decision_admits(case) -> None:
    cfg, snap, priority, elapsed_s, deadline_s = case
    assert admits_at_once(total=snap.total, service_s=snap.service_s, priority=priority,
                          elapsed_s=elapsed_s, deadline_s=deadline_s, config=cfg)
    d = decide_edge(snap, priority=priority, elapsed_s=elapsed_s, deadline_s=deadline_s,
                    config=cfg)
    assert d.admit and d.reason is None, d


@settings(max_examples=500, deadline=None)
@given(
    in_flight=st.lists(st.integers(0, 40), min_size=4, max_size=4),
    rates=st.lists(st.floats(0.0, 500.0), min_size=4, max_size=4),
    service_s=st.floats(0.0, 0.05),
    standing=st.one_of(st.none(), st.integers(0, 80)),
    priority=st.sampled_from(list(Priority)),
    elapsed_s=st.floats(0.0, 1.0),
    deadline_s=st.floats(0.0, 2.0),
    max_in_flight=st.integers(1, 64),
    shares=_SORTED4,
    ceilings=_ceilings(),
    burst=st.floats(1.0, 3.0),
)
def test_admits_at_once_never_where_the_full_decision_sheds(
        in_flight, rates, service_s, standing, priority, elapsed_s, deadline_s, max_in_flight,
        shares, ceilings, burst) -> None:
    # Anywhere in the space (where admits_at_once rarely holds): a shed is never pre-empted.
    cfg = _edge_config(max_in_flight, shares, ceilings, burst)
    snap = EdgeSnapshot(dict(zip(Priority, in_flight, strict=True)), service_s,
                        dict(zip(Priority, rates, strict=True)), standing=standing)
    quick = admits_at_once(total=snap.total, service_s=service_s, priority=priority,
                           elapsed_s=elapsed_s, deadline_s=deadline_s, config=cfg)
    d = decide_edge(snap, priority=priority, elapsed_s=elapsed_s, deadline_s=deadline_s,
                    config=cfg)
    assert d.admit or not quick, d


def test_admits_at_once_defers_to_the_full_decision_near_any_limit() -> None:
    cfg = EdgeConfig(max_queue_delay_s={"realtime": 0.5, "interactive": 0.5, "batch": 0.3,
                                        "background": 0.2})  # interactive: share 24 of 32,
    # ceiling 0.5 s; margin 5 ms

    def quick(total: int, service_s: float = 0.001, elapsed_s: float = 0.0,
              deadline_s: float = 1.0) -> bool:
        return admits_at_once(total=total, service_s=service_s, priority=IA,
                              elapsed_s=elapsed_s, deadline_s=deadline_s, config=cfg)

    assert quick(0) and quick(23)
    assert not quick(24)  # at the class's share: the burst rule needs the snapshot
    assert quick(10, service_s=0.002)  # worst case 11 x 2 ms / 5 % = 0.44 s
    assert not quick(10, service_s=0.003)  # 0.66 s: over the ceiling in the worst case
    assert not quick(10, deadline_s=0.2)  # 0.22 s of worst case does not fit the budget
    assert not quick(0, elapsed_s=0.99)  # nor does it once most of the budget is gone


def test_by_default_only_realtime_has_a_latency_objective_the_rest_only_their_deadline() -> None:
    cfg = EdgeConfig()
    assert cfg.max_queue_delay_s == {"realtime": 0.08, "interactive": None, "batch": None,
                                     "background": None}
    # 12 interactive ahead at 20 ms: 240 ms of queue, which a 500 ms deadline still allows
    snap = EdgeSnapshot({IA: 12}, 0.02)
    assert decide_edge(snap, priority=IA, elapsed_s=0.0, deadline_s=0.5, config=cfg).admit
    # ... and which a 200 ms one does not: shed because the queue makes it miss
    d = decide_edge(snap, priority=IA, elapsed_s=0.0, deadline_s=0.2, config=cfg)
    assert not d.admit and d.reason == "would_miss_deadline"
    # realtime is held to its 80 ms: 5 realtime ahead at 20 ms is 100 ms, shed as overload
    d = decide_edge(EdgeSnapshot({RT: 5}, 0.02), priority=RT, elapsed_s=0.0, deadline_s=0.5,
                    config=cfg)
    assert not d.admit and d.reason == "overload:realtime"
    assert decide_edge(EdgeSnapshot({RT: 3}, 0.02), priority=RT, elapsed_s=0.0,
                       deadline_s=0.5, config=cfg).admit
