import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from policies.admission import (
    DEFAULT_OBJECTIVES,
    AdmissionConfig,
    AdmissionSnapshot,
    admission_floors,
    admits_at_once,
    check_objectives,
    decide_admission,
    shed_classes,
    throttle_reject_probability,
)
from policies.priority import Priority as P

CFG = AdmissionConfig()


def snap(in_flight: int, capacity: int = 10, **delays) -> AdmissionSnapshot:
    return AdmissionSnapshot(
        capacity=capacity,
        in_flight={P.INTERACTIVE: in_flight},
        queue_delay_s={P[k.upper()]: v for k, v in delays.items()},
    )


@pytest.mark.parametrize(
    "in_flight, shed",
    [
        (5, set()),
        (6, {P.BACKGROUND}),  # 0.6 >= background ceiling
        (8, {P.BATCH, P.BACKGROUND}),
        (10, {P.INTERACTIVE, P.BATCH, P.BACKGROUND}),
        (15, set(P)),
    ],
)
def test_shedding_by_utilization_lowest_class_first(in_flight, shed):
    assert shed_classes(snap(in_flight), CFG) == shed


def test_the_pools_wait_is_held_to_the_same_objectives_as_the_edge():
    # One rule (policies.admission.shed_reason): realtime's published wait past its 80 ms
    # objective sheds realtime; a class without an objective only when the wait would make it
    # miss its deadline, whatever the classes above it wait.
    s = snap(1, realtime=0.09, interactive=0.3, batch=2.0)
    d = decide_admission(s, priority=P.REALTIME, budget_s=1.0, config=CFG)
    assert (d.admit, d.reason) == (False, "overload:realtime")
    assert decide_admission(s, priority=P.INTERACTIVE, budget_s=1.0, config=CFG).admit
    d = decide_admission(s, priority=P.BATCH, budget_s=1.0, config=CFG)
    assert (d.admit, d.reason) == (False, "would_miss_deadline")
    assert decide_admission(snap(1, realtime=0.07), priority=P.REALTIME, budget_s=1.0,
                            config=CFG).admit
    # the objectives are the operator's, passed in (the edge's edge.admission.max_queue_delay_s)
    loose = {**DEFAULT_OBJECTIVES, "realtime": 0.5}
    assert decide_admission(s, priority=P.REALTIME, budget_s=1.0, config=CFG,
                            objectives=loose).admit


def test_a_deadline_too_tight_even_for_an_idle_pool_goes_on_to_its_fallback():
    s = snap(1, interactive=0.3)
    assert decide_admission(s, priority=P.INTERACTIVE, budget_s=0.004, config=CFG,
                            margin_s=0.005).admit
    d = decide_admission(s, priority=P.INTERACTIVE, budget_s=0.2, config=CFG, margin_s=0.005)
    assert (d.admit, d.reason) == (False, "would_miss_deadline")


def test_decision_carries_reason_and_sheds_only_lower_classes():
    s = snap(8)
    d = decide_admission(s, priority=P.BATCH, budget_s=1.0, config=CFG)
    assert (d.admit, d.reason) == (False, "overload:batch")
    d = decide_admission(s, priority=P.BACKGROUND, budget_s=1.0, config=CFG)
    assert (d.admit, d.reason) == (False, "overload:batch")
    assert decide_admission(s, priority=P.INTERACTIVE, budget_s=1.0, config=CFG).admit
    assert decide_admission(s, priority=P.REALTIME, budget_s=1.0, config=CFG).admit


def test_request_that_would_miss_its_deadline_is_shed():
    s = snap(1, interactive=0.3)
    d = decide_admission(s, priority=P.INTERACTIVE, budget_s=0.2, config=CFG)
    assert (d.admit, d.reason) == (False, "would_miss_deadline")
    assert decide_admission(s, priority=P.INTERACTIVE, budget_s=0.5, config=CFG).admit


def test_zero_capacity_sheds_everything_once_busy():
    s = AdmissionSnapshot(capacity=0, in_flight={P.REALTIME: 1})
    assert shed_classes(s, CFG) == set(P)
    assert shed_classes(AdmissionSnapshot(capacity=0), CFG) == set()


def test_config_must_name_every_class():
    with pytest.raises(ValidationError, match="max_utilization needs exactly the classes"):
        AdmissionConfig(max_utilization={"realtime": 1.0})
    with pytest.raises(ValueError, match="max_queue_delay_s values must be > 0"):
        check_objectives({"realtime": 0, "interactive": 1, "batch": 1, "background": 1})
    with pytest.raises(ValueError, match="needs exactly the classes"):
        check_objectives({"realtime": 0.1})


@pytest.mark.parametrize(
    "requests, accepts, k, p",
    [
        (0, 0, 2.0, 0.0),
        (100, 100, 2.0, 0.0),
        (100, 50, 2.0, 0.0),  # accepts at half the rate: k=2 still sends everything
        (100, 25, 2.0, 50 / 101),
        (100, 0, 2.0, 100 / 101),
        (10, 5, 1.0, 5 / 11),
    ],
)
def test_sre_book_rejection_probability(requests, accepts, k, p):
    assert throttle_reject_probability(requests, accepts, k) == pytest.approx(p)


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="k must be > 0"):
        throttle_reject_probability(1, 1, 0)


_DELAY = st.floats(min_value=0.0, max_value=2.0, allow_nan=False)


@st.composite
def _objectives(draw) -> list[float | None]:
    """Latency objectives as check_objectives allows them (non-increasing among those set,
    realtime set whenever another is)."""
    values: list[float | None] = sorted(draw(st.lists(st.floats(0.01, 3.0), min_size=4,
                                                      max_size=4)), reverse=True)
    for i in range(1, 4):
        if draw(st.booleans()):
            values[i] = None
    if draw(st.booleans()) and all(v is None for v in values[1:]):
        values[0] = None
    check_objectives({p.label: v for p, v in zip(P, values, strict=True)})
    return values


@st.composite
def _at_once_case(draw):
    """A config, a snapshot and a budget inside admits_at_once's documented condition: the
    pool's utilisation under every class's ceiling, the longest delay within every class's
    delay ceiling and the budget (every such case, none outside it)."""
    util = draw(st.lists(st.sampled_from([0.25, 0.5, 0.6, 0.8, 1.0, 1.5]), min_size=4,
                         max_size=4))
    ceil = draw(_objectives())
    cfg = AdmissionConfig(max_utilization={p.label: u for p, u in zip(P, util, strict=True)})
    objectives = {p.label: c for p, c in zip(P, ceil, strict=True)}
    capacity = draw(st.integers(1, 64))
    total = draw(st.integers(0, max(0, math.ceil(min(util) * capacity) - 1)))
    assume(total / capacity < min(util))
    cut = sorted(draw(st.lists(st.integers(0, total), min_size=3, max_size=3)))
    in_flight = [b - a for a, b in zip([0, *cut], [*cut, total], strict=True)]
    longest = draw(st.floats(0.0, min((c for c in ceil if c is not None), default=3.0)))
    margin = draw(st.floats(0.0, 0.01))
    budget = longest + margin + draw(st.floats(0.0, 2.0))
    delays = [draw(st.floats(0.0, longest)) for _ in range(3)] + [longest]
    delays = draw(st.permutations(delays))
    s = AdmissionSnapshot(capacity=capacity, in_flight=dict(zip(P, in_flight, strict=True)),
                          queue_delay_s=dict(zip(P, delays, strict=True)))
    return cfg, objectives, margin, s, budget


@settings(max_examples=300, deadline=None)
@given(case=_at_once_case())
def test_admits_at_once_where_its_condition_holds_and_every_class_is_admitted(case):
    cfg, objectives, margin, s, budget = case
    assert admits_at_once(admission_floors(cfg, objectives), in_flight=sum(s.in_flight.values()),
                          capacity=s.capacity, longest_delay_s=max(s.queue_delay_s.values()),
                          budget_s=budget, margin_s=margin)
    for p in P:
        d = decide_admission(s, priority=p, budget_s=budget, config=cfg, objectives=objectives,
                             margin_s=margin)
        assert d.admit and d.reason is None, (p, d)


@settings(max_examples=400, deadline=None)
@given(
    in_flight=st.lists(st.integers(0, 8), min_size=4, max_size=4),
    capacity=st.integers(0, 64),
    delays=st.lists(_DELAY, min_size=4, max_size=4),
    budget=_DELAY,
    util=st.lists(st.sampled_from([0.25, 0.5, 0.6, 0.8, 1.0, 1.5]), min_size=4, max_size=4),
    ceil=_objectives(),
    margin=st.floats(0.0, 0.01),
)
def test_admits_at_once_never_where_the_full_decision_sheds_a_class(
        in_flight, capacity, delays, budget, util, ceil, margin):
    # Anywhere in the space (where admits_at_once rarely holds): a shed is never pre-empted.
    cfg = AdmissionConfig(max_utilization={p.label: u for p, u in zip(P, util, strict=True)})
    objectives = {p.label: c for p, c in zip(P, ceil, strict=True)}
    s = AdmissionSnapshot(capacity=capacity, in_flight=dict(zip(P, in_flight, strict=True)),
                          queue_delay_s=dict(zip(P, delays, strict=True)))
    quick = admits_at_once(admission_floors(cfg, objectives), in_flight=sum(in_flight),
                           capacity=capacity, longest_delay_s=max(delays), budget_s=budget,
                           margin_s=margin)
    admitted = all(decide_admission(s, priority=p, budget_s=budget, config=cfg,
                                    objectives=objectives, margin_s=margin).admit for p in P)
    assert admitted or not quick


def test_admits_at_once_defers_to_the_full_decision_near_any_ceiling():
    floors = admission_floors(CFG)
    assert floors == (0.6, 0.08)  # realtime's objective is the only one by default
    assert admission_floors(CFG, {p.label: None for p in P}) == (0.6, math.inf)
    assert admits_at_once(floors, in_flight=5, capacity=10, longest_delay_s=0.08, budget_s=1.0)
    assert not admits_at_once(floors, in_flight=6, capacity=10, longest_delay_s=0.0, budget_s=1.0)
    assert not admits_at_once(floors, in_flight=0, capacity=10, longest_delay_s=0.09, budget_s=9)
    assert not admits_at_once(floors, in_flight=0, capacity=10, longest_delay_s=0.05,
                              budget_s=0.052, margin_s=0.005)
    assert not admits_at_once(floors, in_flight=0, capacity=10, longest_delay_s=0.2, budget_s=0.1)
    assert not admits_at_once(floors, in_flight=0, capacity=0, longest_delay_s=0.0, budget_s=1.0)
