"""Placement across pool replicas (pure policy) and its wiring into the replica ranking."""

import pytest

from policies.placement import (
    ModelLoad,
    PlacementConfig,
    ReplicaSlot,
    plan_placement,
    replicas_needed,
    target_set,
)
from policies.replica_ranking import ReplicaView, RouteTarget, rank_replicas
from pool.request_router import ArrivalRates, model_load, replica_slots

FOUR = tuple(ReplicaSlot(f"r{i}") for i in range(4))


def test_replicas_needed_is_load_over_capacity_share_clamped():
    cfg = PlacementConfig(capacity_share=0.5)
    assert replicas_needed(None, 4, cfg) == 1
    assert replicas_needed(ModelLoad(0.0, 0.01), 4, cfg) == 1
    assert replicas_needed(ModelLoad(50.0, 0.01), 4, cfg) == 1  # 0.5 s/s: exactly one share
    assert replicas_needed(ModelLoad(51.0, 0.01), 4, cfg) == 2
    assert replicas_needed(ModelLoad(120.0, 0.01), 4, cfg) == 3
    assert replicas_needed(ModelLoad(1000.0, 0.01), 4, cfg) == 4  # never more than exist
    assert replicas_needed(ModelLoad(1000.0, 0.01), 1, cfg) == 1
    # Not measured yet: the configured default compute estimate.
    assert replicas_needed(ModelLoad(120.0, None), 4, PlacementConfig(0.5, 0.01)) == 3


def test_bad_config_names_the_field():
    with pytest.raises(ValueError, match="capacity_share"):
        PlacementConfig(capacity_share=0.0)
    with pytest.raises(ValueError, match="default_compute_s"):
        PlacementConfig(default_compute_s=-1.0)


def test_a_cold_model_lives_on_one_stable_replica():
    homes = {m: target_set(m, ModelLoad(1.0, 0.01), FOUR) for m in (f"m{i}" for i in range(40))}
    assert all(len(t) == 1 for t in homes.values())
    # Rendezvous hashing spreads the cold models over the replicas...
    assert len({next(iter(t)) for t in homes.values()}) == 4
    # ...and the choice is the same whatever the replicas' order, and stable when a replica
    # joins: only models that move to the new replica move at all.
    assert target_set("m7", None, FOUR[::-1]) == homes["m7"]
    grown = (*FOUR, ReplicaSlot("r4"))
    moved = [m for m, t in homes.items() if target_set(m, ModelLoad(1.0, 0.01), grown) != t]
    assert 0 < len(moved) < 20
    assert all(target_set(m, None, grown) == {"r4"} for m in moved)


def test_a_resident_replica_is_kept_so_a_cold_model_is_not_swapped_in_again():
    home = next(iter(target_set("m1", None, FOUR)))
    other = next(r.id for r in FOUR if r.id != home)
    replicas = [ReplicaSlot(r.id, frozenset({"m1"}) if r.id == other else frozenset())
                for r in FOUR]
    assert target_set("m1", None, replicas) == {other}


def test_a_cold_model_goes_where_its_host_copy_is_before_its_hash_home():
    home = next(iter(target_set("m1", None, FOUR)))
    other = next(r.id for r in FOUR if r.id != home)
    hosted = [ReplicaSlot(r.id, hosted=frozenset({"m1"}) if r.id == other else frozenset())
              for r in FOUR]
    assert target_set("m1", None, hosted) == {other}  # a copy from host memory, not a disk load
    resident_elsewhere = [ReplicaSlot(r.id, frozenset({"m1"}) if r.id == home else frozenset(),
                                      frozenset({"m1"}) if r.id == other else frozenset())
                          for r in FOUR]
    assert target_set("m1", None, resident_elsewhere) == {home}  # resident beats hosted


def test_a_hot_model_keeps_its_resident_replica_and_adds_by_rendezvous_order():
    replicas = [ReplicaSlot("r0"), ReplicaSlot("r1", frozenset({"hot"})), ReplicaSlot("r2"),
                ReplicaSlot("r3")]
    two = target_set("hot", ModelLoad(80.0, 0.01), replicas)  # 0.8 s/s over 0.5 shares: 2
    assert len(two) == 2 and "r1" in two
    three = target_set("hot", ModelLoad(120.0, 0.01), replicas)
    assert len(three) == 3 and two <= three  # growing keeps the replicas already chosen


def test_plan_covers_every_loaded_model():
    plan = plan_placement({"hot": ModelLoad(200.0, 0.01), "cold": ModelLoad(0.5, 0.01)}, FOUR)
    assert plan.replicas_per_model == {"hot": 4, "cold": 1}
    assert plan_placement({"a": ModelLoad(1.0)}, ()).targets == {"a": frozenset()}


def rv(id, resident=(), delay=0.0):
    return ReplicaView(id, frozenset(resident), frozenset(), (delay,) * 4)


def test_ranking_puts_the_target_set_first_even_before_a_resident_replica():
    replicas = [rv("home"), rv("elsewhere", {"a@1"})]
    # Without a plan the resident replica wins; with one, the burst queues on its home.
    assert rank_replicas(replicas, RouteTarget("a")) == [["elsewhere"], ["home"]]
    assert rank_replicas(replicas, RouteTarget("a"), frozenset({"home"})) == [
        ["home"], ["elsewhere"]]


def test_target_members_share_a_rank_within_the_wait_slack():
    replicas = [rv("r0", {"hot@1"}, 0.02), rv("r1", (), 0.04), rv("r2", (), 0.5), rv("r3")]
    ranks = rank_replicas(replicas, RouteTarget("hot"), frozenset({"r0", "r1", "r2"}))
    # r1 (not resident yet) shares the first rank, so the hot model spreads to it; r2's queue
    # is far longer; r3 is outside the target set and comes last.
    assert ranks == [["r0", "r1"], ["r2"], ["r3"]]


def test_a_target_set_with_no_reporting_member_falls_back_to_plain_ranking():
    replicas = [rv("a", {"m@1"}), ReplicaView("gone")]
    assert rank_replicas(replicas, RouteTarget("m"), frozenset({"gone"})) == [["a"], ["gone"]]


def test_arrival_rates_slide_and_forget():
    now = [100.0]
    rates = ArrivalRates(window_s=2.0, clock=lambda: now[0])
    for _ in range(10):
        rates.record("a")
    assert rates.rate("a") == 5.0 and rates.rate("b") == 0.0
    now[0] += 2.5
    assert rates.rate("a") == 0.0 and "a" not in rates._seen
    with pytest.raises(ValueError, match="rate_window_s"):
        ArrivalRates(window_s=0)


def test_router_views_read_published_stats():
    stats = [("r0", {"queue_delay_s": [0.0] * 4, "resident": ["a@1", "b@2"],
                     "hosted": ["a@1", "c@1"], "row_cost_s": {"a@1": 0.004}}),
             ("r1", {"queue_delay_s": [0.0] * 4, "resident": [], "row_cost_s": {"a@2": 0.006}}),
             ("r2", None)]
    assert replica_slots(stats) == [ReplicaSlot("r0", frozenset({"a", "b"}), frozenset({"a", "c"})),
                                    ReplicaSlot("r1")]
    assert model_load("a", 3.0, stats) == ModelLoad(3.0, 0.006)
    assert model_load("c", 3.0, stats) == ModelLoad(3.0, None)
