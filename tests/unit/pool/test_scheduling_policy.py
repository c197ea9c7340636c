"""Scheduling policy (pure, fake clock): classes, aging, EDF, batching, chunks, slices, expiry."""

import pytest

from policies.device_queue import ModelView, RequestView, SchedulerSnapshot
from policies.priority import Priority
from policies.scheduling import (
    FifoSchedulingPolicy,
    PrioritySchedulingPolicy,
    get_scheduling_policy,
)

R, I, B, G = Priority.REALTIME, Priority.INTERACTIVE, Priority.BATCH, Priority.BACKGROUND
NOW = 100.0


def req(id, priority=I, *, deadline=None, arrival=NOW, rows=1, started=False):
    return RequestView(id, priority, deadline, arrival, rows, started)


def model(key, *reqs, resident=True, max_batch=32, wait=0.0, row_cost=0.0):
    return ModelView(key, resident, tuple(reqs), max_batch, wait, row_cost,
                     0.0 if resident else 0.1)


def snap(*models, now=NOW, current=None, slice_start=NOW, slice_s=0.05, chunk=16):
    return SchedulerSnapshot(now, tuple(models), current, slice_start, slice_s, chunk)


policy = PrioritySchedulingPolicy(aging_s=2.0, soft_deadline_s=8.0)


def test_idle_when_nothing_queued():
    d = policy.decide(snap(model("a")))
    assert d.model is None and d.wait_until is None


def test_higher_class_first_regardless_of_arrival():
    d = policy.decide(snap(model("bg", req(1, G, arrival=NOW - 1)), model("rt", req(2, R))))
    assert d.model == "rt" and d.request_ids == (2,) and d.priority == R


def test_earliest_deadline_first_within_a_class():
    d = policy.decide(snap(
        model("late", req(1, I, deadline=NOW + 5, arrival=NOW - 1)),
        model("soon", req(2, I, deadline=NOW + 1)),
    ))
    assert d.model == "soon"


def test_aging_promotes_a_waiting_request_one_class_per_aging_period():
    old_bg = req(1, G, arrival=NOW - 4.5)  # two periods waited: background -> interactive
    d = policy.decide(snap(model("bg", old_bg), model("batch", req(2, B))))
    assert d.model == "bg" and d.priority == I
    assert policy.effective_class(old_bg, NOW) == I
    assert policy.effective_class(req(3, G, arrival=NOW - 100), NOW) == R


def test_a_batch_request_half_way_to_its_deadline_goes_before_interactive_work_with_time_to_spare():
    # Strict classes at full load leave batch to miss its deadline while interactive has time
    # to spare: past half its budget a batch request is ranked with interactive, by deadline.
    late_batch = req(1, B, arrival=NOW - 0.3, deadline=NOW + 0.2)  # 300 of 500 ms waited
    fresh_ia = req(2, I, arrival=NOW - 0.01, deadline=NOW + 0.49)
    d = policy.decide(snap(model("b", late_batch), model("i", fresh_ia)))
    assert d.model == "b" and d.priority == I
    assert policy.effective_class(late_batch, NOW) == I
    # before half its budget it still waits behind interactive
    early_batch = req(3, B, arrival=NOW - 0.2, deadline=NOW + 0.3)
    d = policy.decide(snap(model("b", early_batch), model("i", fresh_ia)))
    assert d.model == "i"
    # an interactive request with the earlier deadline still goes first
    urgent_ia = req(4, I, arrival=NOW - 0.45, deadline=NOW + 0.05)
    d = policy.decide(snap(model("b", late_batch), model("i", urgent_ia)))
    assert d.model == "i"
    # background moves up to batch, not further; nothing is promoted into realtime by it
    late_bg = req(5, G, arrival=NOW - 0.4, deadline=NOW + 0.1)
    assert policy.effective_class(late_bg, NOW) == B
    d = policy.decide(snap(model("b", late_batch), model("rt", req(6, R, deadline=NOW + 1))))
    assert d.model == "rt"
    # without a deadline there is no budget to measure: only aging applies
    assert policy.effective_class(req(7, B, arrival=NOW - 1.0), NOW) == B


def test_promote_after_is_a_share_of_the_budget():
    assert PrioritySchedulingPolicy(promote_after=1.0).effective_class(
        req(1, B, arrival=NOW - 0.3, deadline=NOW + 0.2), NOW) == B
    with pytest.raises(ValueError, match="promote_after"):
        PrioritySchedulingPolicy(promote_after=0)


def test_aged_request_eventually_beats_fresh_realtime_work():
    starving = req(1, G, arrival=NOW - 9.0)  # soft deadline arrival+8 s is already past
    fresh_rt = req(2, R, deadline=NOW + 0.5)
    d = policy.decide(snap(model("bg", starving), model("rt", fresh_rt)))
    assert d.model == "bg"


def test_expired_and_hopeless_requests_are_not_run():
    d = policy.decide(snap(model(
        "a",
        req(1, deadline=NOW - 0.001),            # past
        req(2, deadline=NOW + 0.005, rows=10),   # 10 rows * 1 ms > 5 ms left
        req(3, deadline=NOW + 1.0, rows=10),
        row_cost=0.001,
    )))
    assert set(d.expired) == {1, 2}
    assert d.model == "a" and d.request_ids == (3,)


def test_dynamic_batching_takes_requests_up_to_max_batch_in_rank_order():
    reqs = [req(i, I, deadline=NOW + 10 - i, rows=10) for i in range(5)]
    d = policy.decide(snap(model("a", *reqs, max_batch=32)))
    assert d.request_ids == (4, 3, 2, 1) and d.rows == 32  # the 4th is split


def test_waits_for_a_batch_to_fill_until_the_oldest_has_waited_batch_wait():
    m = model("a", req(1, arrival=NOW - 0.001), wait=0.005)
    d = policy.decide(snap(m))
    assert d.model is None and d.wait_until == pytest.approx(NOW + 0.004)
    d = policy.decide(snap(m, now=NOW + 0.004))
    assert d.model == "a"


def test_full_batch_does_not_wait():
    d = policy.decide(snap(model("a", req(1, rows=32), wait=1.0)))
    assert d.model == "a"


def test_non_realtime_batches_run_in_chunks_realtime_whole():
    d = policy.decide(snap(model("bg", req(1, G, rows=64), max_batch=64), chunk=16))
    assert d.rows == 64 and d.chunk_rows == 16
    d = policy.decide(snap(model("rt", req(1, R, rows=64), max_batch=64), chunk=16))
    assert d.chunk_rows == 64


def test_preemption_bound_realtime_runs_at_the_next_chunk_boundary():
    # A background batch is mid-way (started); a realtime request arrives: the very next decision
    # serves it, so it waited for at most the one chunk that was running.
    bg = model("bg", req(1, G, rows=48, started=True, arrival=NOW - 0.01), max_batch=64)
    d = policy.decide(snap(bg, model("rt", req(2, R)), current="bg", slice_start=NOW - 0.001))
    assert d.model == "rt"


def test_time_slice_keeps_a_resident_model_instead_of_swapping():
    cur = model("cur", req(1, I, arrival=NOW - 0.002, deadline=NOW + 2))
    other = model("other", req(2, I, arrival=NOW - 0.5, deadline=NOW + 1), resident=False)
    d = policy.decide(snap(cur, other, current="cur", slice_start=NOW - 0.01, slice_s=0.05))
    assert d.model == "cur" and d.reason == "slice"
    # slice used up: the better-ranked model gets the device (and a swap)
    d = policy.decide(snap(cur, other, current="cur", slice_start=NOW - 0.06, slice_s=0.05))
    assert d.model == "other"


def test_slice_does_not_hold_back_a_more_urgent_class_or_a_resident_model():
    cur = model("cur", req(1, G))
    rt_swap = model("rt", req(2, R), resident=False)
    assert policy.decide(snap(cur, rt_swap, current="cur")).model == "rt"
    other_resident = model("other", req(3, G, arrival=NOW - 1))
    assert policy.decide(snap(cur, other_resident, current="cur")).model == "other"


def test_fifo_ignores_classes_and_runs_whole_batches():
    fifo = FifoSchedulingPolicy()
    d = fifo.decide(snap(model("bg", req(1, G, rows=64, arrival=NOW - 1), max_batch=64),
                         model("rt", req(2, R))))
    assert d.model == "bg" and d.chunk_rows == 64


def test_registry():
    assert isinstance(get_scheduling_policy("fifo"), FifoSchedulingPolicy)
    assert get_scheduling_policy("priority", aging_s=1.0).aging_s == 1.0
    with pytest.raises(ValueError, match="fifo, priority"):
        get_scheduling_policy("lottery")
    with pytest.raises(ValueError, match="aging_s"):
        PrioritySchedulingPolicy(aging_s=0)


def test_chunks_are_sized_in_milliseconds_of_measured_work_capped_by_chunk_size():
    timed = PrioritySchedulingPolicy(chunk_ms=2.0)
    bg = model("bg", req(1, G, rows=512), max_batch=512, row_cost=0.0001)  # 0.1 ms per row
    assert timed.decide(snap(bg, chunk=1024)).chunk_rows == 20  # 2 ms / 0.1 ms
    assert timed.decide(snap(bg, chunk=16)).chunk_rows == 16  # chunk_size is the row cap
    slow = model("bg", req(1, G, rows=512), max_batch=512, row_cost=0.01)  # 10 ms per row
    assert timed.decide(snap(slow, chunk=1024)).chunk_rows == 1  # never less than one row
    unknown = model("bg", req(1, G, rows=512), max_batch=512, row_cost=0.0)
    assert timed.decide(snap(unknown, chunk=64)).chunk_rows == 64  # no estimate yet: row cap


def test_a_decision_carries_its_chunks_estimated_work_only_when_that_is_measured():
    timed = PrioritySchedulingPolicy(chunk_ms=2.0)
    hot = model("a", req(1, I, rows=64), max_batch=64, row_cost=0.0001)
    d = timed.decide(snap(hot, chunk=1024))
    assert d.model == "a" and d.work_s == pytest.approx(20 * 0.0001)
    guess = ModelView("a", True, (req(1, I, rows=64),), 64, row_cost_s=0.0001, measured=False)
    cold = model("a", req(1, I, rows=64), max_batch=64, row_cost=0.0001, resident=False)
    for m in (guess, cold):  # a guessed cost, or a swap-in inside the chunk: nothing to learn
        d = timed.decide(snap(m, chunk=1024))
        assert d.model == "a" and d.work_s == 0.0


def test_chunk_budget_per_class_and_realtime_whole_by_default():
    per_class = PrioritySchedulingPolicy(chunk_ms={I: 1.0, G: 4.0})

    def m(cls):
        return model("m", req(1, cls, rows=512), max_batch=512, row_cost=0.0001)

    assert per_class.decide(snap(m(I), chunk=1024)).chunk_rows == 10
    assert per_class.decide(snap(m(G), chunk=1024)).chunk_rows == 40
    assert per_class.decide(snap(m(B), chunk=1024)).chunk_rows == 20  # default 2 ms
    assert per_class.decide(snap(m(R), chunk=1024)).chunk_rows == 512
    whole_bg = PrioritySchedulingPolicy(chunk_ms={G: None})
    assert whole_bg.decide(snap(m(G), chunk=16)).chunk_rows == 512


def test_aged_background_still_runs_in_chunks():
    # Aging wins an old request its turn (effective class realtime) but not the right to hold
    # the device for its whole batch: it is chunked by its own class.
    old = model("bg", req(1, G, rows=512, arrival=NOW - 7.0), max_batch=512, row_cost=0.0001)
    d = PrioritySchedulingPolicy(chunk_ms=2.0).decide(snap(old, chunk=1024))
    assert d.priority == R and d.chunk_rows == 20


def test_chunk_ms_must_be_positive():
    with pytest.raises(ValueError, match="chunk_ms must be > 0.*background"):
        PrioritySchedulingPolicy(chunk_ms={G: 0.0})
    with pytest.raises(ValueError, match="chunk_ms"):
        PrioritySchedulingPolicy(chunk_ms=-1)


def test_requests_that_would_miss_behind_the_work_ranked_ahead_are_expired():
    # Each alone fits its deadline; together the second would finish at +20 ms > +16 ms.
    a = model("a", req(1, I, deadline=NOW + 0.015, rows=10), req(2, I, deadline=NOW + 0.016,
                                                                    rows=10), row_cost=0.001)
    d = policy.decide(snap(a))
    assert d.expired == (2,) and d.request_ids == (1,)
    # A more urgent class is ahead of an interactive request even with a later deadline.
    rt = model("rt", req(3, R, deadline=NOW + 1.0, rows=10), row_cost=0.001)
    i = model("i", req(4, I, deadline=NOW + 0.012, rows=5), row_cost=0.001)
    d = policy.decide(snap(rt, i))
    assert d.expired == (4,) and d.model == "rt"
    # A swap-in counts once per model that is not resident.
    cold = ModelView("cold", False, (req(5, I, deadline=NOW + 0.05, rows=1),
                                     req(6, I, deadline=NOW + 0.05, rows=1)), 32, 0.0, 0.001, 0.04)
    d = policy.decide(snap(cold))
    assert d.expired == () and d.request_ids == (5, 6)
    # Without deadlines nothing is dropped, however much work is queued.
    bg = model("bg", *[req(10 + k, G, rows=100) for k in range(5)], row_cost=0.001)
    assert policy.decide(snap(bg)).expired == ()


def test_batching_wait_only_when_another_arrival_is_expected():
    from dataclasses import replace

    busy = replace(model("m", req(1), wait=0.002), arrival_gap_s=0.0005)
    d = policy.decide(snap(busy, now=NOW + 0.001))
    assert d.model is None and d.reason == "batching" and d.wait_until == pytest.approx(NOW + 0.002)
    quiet = replace(model("m", req(1), wait=0.002), arrival_gap_s=float("inf"))
    d = policy.decide(snap(quiet, now=NOW + 0.001))
    assert d.model == "m" and d.request_ids == (1,)
    assert policy.decide(snap(busy, now=NOW + 0.003)).model == "m"  # the wait has passed


def loading(key, *reqs, row_cost=0.001):
    """A model with 0.2 s of its disk load left."""
    return ModelView(key, False, tuple(reqs), 32, 0.0, row_cost, 0.2, loading=True)


def test_a_model_loading_from_disk_does_not_hold_the_device_for_the_others():
    # The cold request is first by deadline, but its weights are still on their way from disk:
    # the resident model runs meanwhile, and is not charged the load as work ahead.
    cold = loading("cold", req(1, deadline=NOW + 0.25, arrival=NOW - 0.01))
    hot = model("hot", req(2, deadline=NOW + 0.3), row_cost=0.001)
    d = policy.decide(snap(cold, hot))
    assert d.model == "hot" and d.request_ids == (2,) and d.expired == ()
    # Loaded on the device's path instead (same estimate), the cold model goes first and holds
    # the device for its 0.2 s swap; a resident request due before that ends is refused.
    blocking = ModelView("cold", False, cold.requests, 32, 0.0, 0.001, 0.2)
    assert policy.decide(snap(blocking, hot)).model == "cold"
    tight = model("hot", req(2, deadline=NOW + 0.26, rows=64), row_cost=0.001)
    assert policy.decide(snap(blocking, tight)).expired == (2,)
    assert policy.decide(snap(cold, tight)).model == "hot"


def test_a_loading_models_requests_expire_once_the_rest_of_the_load_would_miss():
    cold = loading("cold", req(1, deadline=NOW + 0.3), req(2, deadline=NOW + 0.2),
                   req(3, deadline=NOW))
    d = policy.decide(snap(cold))
    # 0.2 s of load plus 1 ms of its own work: request 2 is refused now, not at its deadline;
    # request 1 waits, and the worker wakes at its deadline in case the load overruns
    assert d.model is None and d.expired == (2, 3) and d.wait_until == NOW + 0.3
    behind = policy.decide(SchedulerSnapshot(NOW, (cold,), pace=2.0))
    assert behind.expired == (1, 2, 3)  # at twice the estimates, 0.4 s: even request 1 misses
    no_deadline = policy.decide(snap(loading("cold", req(3))))
    assert no_deadline.model is None and no_deadline.wait_until is None


# -- the lone-request shortcut decides exactly what the general path decides ----------------
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_lone = st.builds(
    lambda pri, deadline_in, age, rows, started, resident, max_batch, wait, row_cost, gap,
    measured, current, pace: (
        SchedulerSnapshot(
            NOW,
            (ModelView("m", resident,
                       (RequestView(7, pri, None if deadline_in is None else NOW + deadline_in,
                                    NOW - age, rows, started),),
                       max_batch, wait, row_cost, 0.0 if resident else 0.02, gap, False,
                       measured),),
            current, NOW - 0.01, 0.05, 16, pace)),
    st.sampled_from(list(Priority)), st.one_of(st.none(), st.floats(-0.01, 0.05)),
    st.floats(0.0, 5.0), st.integers(1, 64), st.booleans(), st.booleans(),
    st.integers(1, 64), st.sampled_from([0.0, 0.002, 0.01]), st.floats(0.0, 0.001),
    st.sampled_from([0.0, 0.001, float("inf")]), st.booleans(),
    st.sampled_from([None, "m", "other"]), st.floats(0.5, 3.0))


@settings(max_examples=400, deadline=None)
@given(_lone, st.sampled_from([policy, FifoSchedulingPolicy(),
                               PrioritySchedulingPolicy(chunk_ms=1.0)]))
def test_the_lone_request_shortcut_equals_the_general_decision(s, pol):
    assert pol.decide(s) == pol._decide(s)


def test_a_device_whose_streams_preempt_runs_batches_whole_and_the_cpu_stand_in_chunks():
    from policies.scheduling import device_scheduling_policy

    s = snap(model("bg", req(1, G, rows=64), max_batch=64, row_cost=0.001), chunk=64)
    assert device_scheduling_policy("priority", stream_priorities=True).decide(s).chunk_rows == 64
    assert device_scheduling_policy("priority", stream_priorities=False).decide(s).chunk_rows == 2
    fifo = device_scheduling_policy("fifo", stream_priorities=True)
    assert isinstance(fifo, FifoSchedulingPolicy)


# -- the worker's arrival shortcut (plain numbers, no snapshot) decides what decide() does -----
_arrival = st.fixed_dictionaries({
    "priority": st.sampled_from(list(Priority)),
    "deadline_in": st.one_of(st.none(), st.floats(-0.01, 0.05)),
    "rows": st.integers(1, 64), "max_batch": st.integers(1, 64),
    "row_cost": st.floats(0.0, 0.001), "measured": st.booleans(),
    "current": st.sampled_from([None, "m", "other"]), "pace": st.floats(0.5, 3.0),
    "chunk": st.sampled_from([1, 16, 64]),
    "wait": st.sampled_from([0.0, 0.002, 0.01]),
    "gap": st.sampled_from([0.0, 0.001, float("inf")]),
})


@settings(max_examples=400, deadline=None)
@given(_arrival, st.sampled_from([policy, FifoSchedulingPolicy(),
                                  PrioritySchedulingPolicy(chunk_ms=1.0)]))
def test_the_arrival_shortcut_equals_the_general_decision(a, pol):
    # Where the worker takes it: one fresh request (arrived now, nothing run), a resident
    # model; forming a batch or not is the policy's call on both paths.
    deadline = None if a["deadline_in"] is None else NOW + a["deadline_in"]
    s = SchedulerSnapshot(
        NOW, (ModelView("m", True, (RequestView(7, a["priority"], deadline, NOW, a["rows"]),),
                        a["max_batch"], a["wait"], a["row_cost"], 0.0, a["gap"], False,
                        a["measured"]),),
        a["current"], NOW - 0.01, 0.05, a["chunk"], a["pace"])
    fast = pol.decide_arrival(now=NOW, model="m", request_id=7, priority=a["priority"],
                              deadline=deadline, rows=a["rows"], max_batch_size=a["max_batch"],
                              row_cost_s=a["row_cost"], measured=a["measured"],
                              chunk_size=a["chunk"], pace=a["pace"],
                              batch_wait_s=a["wait"], arrival_gap_s=a["gap"])
    assert fast == pol.decide(s) == pol._decide(s)
