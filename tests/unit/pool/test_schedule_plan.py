"""``SchedulingPolicy.plan``: one triage, several launches (pure, fixed clock).

A device that runs several batches at once (CUDA streams) fills its free slots from one
triage instead of one triage per slot; the first decision of a plan is :meth:`decide`'s.
"""

import random

import pytest

from policies.device_queue import ModelView, RequestView, SchedulerSnapshot
from policies.priority import Priority
from policies.scheduling import FifoSchedulingPolicy, PrioritySchedulingPolicy

R, I, B, G = Priority.REALTIME, Priority.INTERACTIVE, Priority.BATCH, Priority.BACKGROUND
NOW = 100.0
ROOMS = (2, 2, 2, 2)


def req(id, priority=I, *, deadline=None, arrival=NOW, rows=1):
    return RequestView(id, priority, deadline, arrival, rows)


def model(key, *reqs, resident=True, wait=0.0, gap=0.0, row_cost=0.001):
    return ModelView(key, resident, tuple(reqs), 32, wait, row_cost,
                     0.0 if resident else 0.01, gap)


def snap(*models):
    return SchedulerSnapshot(NOW, tuple(models))


policy = PrioritySchedulingPolicy()


def test_a_plan_fills_the_free_slots_with_distinct_models_in_rank_order():
    s = snap(model("a", req(1, deadline=NOW + 0.3), req(2, deadline=NOW + 0.3)),
             model("b", req(3, deadline=NOW + 0.1)),
             model("c", req(4, G)),
             model("d", req(5, R)))
    plan = policy.plan(s, limit=8, rooms=ROOMS)
    assert [d.model for d in plan] == ["d", "b", "a", "c"]
    assert plan[0] == policy.decide(s)
    assert plan[2].request_ids == (1, 2)  # a model's live requests batch together
    assert [d.priority for d in plan] == [R, I, I, G]
    # every live request launches with the plan: none is left to rank an arrival behind
    assert plan[0].tail is None and plan[0].tail_all == policy.rank(req(4, G), NOW)
    first_two = policy.plan(s, limit=2, rooms=ROOMS)
    assert first_two[0].tail == policy.rank(req(4, G), NOW)


def test_the_first_decision_carries_the_expired_and_the_live_work():
    s = snap(model("a", req(1, deadline=NOW + 0.0005)),  # misses behind its own work
             model("b", req(2, deadline=NOW + 0.3, rows=3)),
             model("c", req(3, deadline=NOW + 0.2), resident=False))
    plan = policy.plan(s, limit=4, rooms=ROOMS)
    assert plan[0].expired == (1,) and all(d.expired == () for d in plan[1:])
    assert [d.model for d in plan] == ["c", "b"]
    assert plan[0].live_s == pytest.approx(0.001 + 0.01 + 0.003)  # c's swap, then b
    # (b runs a 2 ms chunk: two of its three rows)
    assert plan[0].cost_s == pytest.approx(0.011) and plan[1].cost_s == pytest.approx(0.002)
    assert plan[0].tail == policy.rank(req(2, deadline=NOW + 0.3, rows=3), NOW)


def test_a_class_without_room_is_left_out_and_the_plan_stops_at_the_limit():
    s = snap(model("a", req(1, deadline=NOW + 0.1)), model("b", req(2, deadline=NOW + 0.2)),
             model("c", req(3, deadline=NOW + 0.3)), model("g", req(4, G)))
    only_bg = policy.plan(s, limit=8, rooms=(0, 1, 0, 1))
    assert [d.model for d in only_bg] == ["a", "g"]  # b and c wait for an interactive slot
    assert [d.model for d in policy.plan(s, limit=2, rooms=ROOMS)] == ["a", "b"]


def test_a_plan_ends_at_a_batch_still_forming():
    s = snap(model("a", req(1, deadline=NOW + 0.1)),
             model("b", req(2, deadline=NOW + 0.2, arrival=NOW - 0.001), wait=0.01, gap=0.001),
             model("c", req(3, deadline=NOW + 0.3)))
    plan = policy.plan(s, limit=8, rooms=ROOMS)
    assert [d.model for d in plan] == ["a", None]
    assert plan[1].wait_until == pytest.approx(NOW - 0.001 + 0.01)


@pytest.mark.parametrize("pol", [policy, FifoSchedulingPolicy()], ids=lambda p: p.name)
def test_a_plan_of_one_is_the_decision(pol):
    rng = random.Random(3)
    for _ in range(300):
        models, rid = [], 0
        for k in range(rng.randint(1, 5)):
            reqs = []
            for _ in range(rng.randint(1, 4)):
                deadline = None if rng.random() < 0.3 else NOW + rng.uniform(-0.001, 0.05)
                reqs.append(req(rid, Priority(rng.randint(0, 3)), deadline=deadline,
                                arrival=NOW - rng.uniform(0, 3), rows=rng.randint(1, 8)))
                rid += 1
            models.append(model(f"m{k}", *reqs, resident=rng.random() < 0.6,
                                row_cost=rng.uniform(0, 0.003)))
        s = snap(*models)
        full = pol.plan(s, limit=8, rooms=ROOMS)
        assert pol.plan(s, limit=1)[0] == pol.decide(s) == full[0]
        planned = [d.model for d in full if d.model is not None]
        assert len(planned) == len(set(planned))
