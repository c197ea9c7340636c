"""Eviction policy (pure): order, eligibility, feasibility, registry."""

import pytest

from policies.eviction import (
    EvictionRequest,
    LruEviction,
    PriorityLruEviction,
    ResidentView,
    get_eviction_policy,
)
from policies.priority import Priority

R, I, B, G = Priority.REALTIME, Priority.INTERACTIVE, Priority.BATCH, Priority.BACKGROUND


def view(key, *, nbytes=100, priority=I, last_used=0.0, cost=0.01, queued=None, running=False,
         pinned=False):
    return ResidentView(key, nbytes, priority, last_used, cost, queued, running, pinned)


def request(*views, need=100, free=0, priority=I, now=10.0):
    return EvictionRequest(need, free, priority, now, tuple(views))


def test_no_eviction_when_enough_is_free():
    d = PriorityLruEviction().choose(request(view("a"), need=100, free=100))
    assert d.feasible and d.victims == ()


def test_lowest_class_goes_first_then_least_recent():
    views = [
        view("rt", priority=R, last_used=1.0),
        view("bg-new", priority=G, last_used=9.0),
        view("bg-old", priority=G, last_used=2.0),
        view("int", priority=I, last_used=0.5),
    ]
    d = PriorityLruEviction().choose(request(*views, need=400))
    assert d.victims == ("bg-old", "bg-new", "int", "rt")


def test_reload_cost_breaks_recency_ties():
    views = [view("costly", cost=5.0, last_used=3.0), view("cheap", cost=0.1, last_used=3.01)]
    d = PriorityLruEviction(recency_bucket_s=1.0).choose(request(*views))
    assert d.victims == ("cheap",)


def test_running_and_pinned_are_never_victims():
    views = [view("run", running=True, priority=G), view("pin", pinned=True, priority=G),
             view("ok", priority=R)]
    d = PriorityLruEviction().choose(request(*views, need=100, priority=R))
    assert d.victims == ("ok",)
    d = PriorityLruEviction().choose(request(*views, need=200, priority=R))
    assert not d.feasible and d.victims == ()


def test_idle_models_go_before_models_with_queued_work():
    views = [view("busy-bg", priority=G, queued=G, last_used=0.0),
             view("idle-int", priority=I, last_used=5.0)]
    assert PriorityLruEviction().choose(request(*views, priority=R)).victims == ("idle-int",)


def test_realtime_may_evict_lower_class_with_queued_work_not_the_reverse():
    views = [view("busy-bg", queued=G), view("busy-rt", queued=R)]
    d = PriorityLruEviction().choose(request(*views, need=100, priority=R))
    assert d.victims == ("busy-bg",)
    d = PriorityLruEviction().choose(request(*views, need=200, priority=G))
    assert not d.feasible


def test_lru_baseline_ignores_priority():
    views = [view("rt", priority=R, last_used=1.0), view("bg", priority=G, last_used=2.0)]
    assert LruEviction().choose(request(*views)).victims == ("rt",)


def test_registry_lists_valid_names():
    assert isinstance(get_eviction_policy("lru"), LruEviction)
    with pytest.raises(ValueError, match="lru, priority_lru"):
        get_eviction_policy("random")
