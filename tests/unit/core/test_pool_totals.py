from pool import DeviceCounters
from router._private.pool_totals import PoolTotals


def _c(replica: str, swaps: int, *, slot: int = 0) -> DeviceCounters:
    return DeviceCounters(device="cpu", replica=replica, swaps_in=swaps, swaps_out=0,
                          swap_bytes=0, swap_seconds=0.0, evictions=0, preemptions=(0,) * 4,
                          queue_depth=(0,) * 4, memory_used_bytes=1, memory_free_bytes=1,
                          memory_total_bytes=2, host_used_bytes=0, slot=slot)


def test_swaps_sum_replicas_and_keep_a_restarted_replicas_old_count() -> None:
    t = PoolTotals()
    t.observe("cpu", _c("a", 5))
    t.observe("cpu", _c("b", 3, slot=1))
    t.observe("cpu", _c("a", 7))
    assert t.swaps() == 10
    t.observe("cpu", _c("a2", 1))  # "a" restarted: a new incarnation counts from zero
    assert t.swaps() == 11
    t.observe("cpu", _c("a", 2))  # a stale, lower report never makes the total go back
    assert t.swaps() == 11


def test_a_new_incarnation_in_a_known_slot_is_a_restart_a_new_slot_is_not() -> None:
    t = PoolTotals()
    t.observe("cpu", _c("a", 0, slot=0))
    t.observe("cpu", _c("b", 0, slot=1))  # a second replica: scale-out, not a restart
    t.observe("gpu", _c("g", 0, slot=0))
    assert t.restarts() == {"cpu": 0, "gpu": 0}
    t.observe("cpu", _c("a2", 0, slot=0))
    t.observe("cpu", _c("a", 0, slot=0))  # the old incarnation's late reply: not another one
    t.observe("cpu", _c("a2", 1, slot=0))
    assert t.restarts() == {"cpu": 1, "gpu": 0}
    t.observe("gpu", _c("g2", 0, slot=0))
    assert t.restarts() == {"cpu": 1, "gpu": 1}


def test_only_recently_seen_incarnations_are_live() -> None:
    now = [0.0]
    t = PoolTotals(live_s=30.0, clock=lambda: now[0])
    t.observe("cpu", _c("a", 1))
    now[0] = 20.0
    t.observe("cpu", _c("a2", 0))
    now[0] = 40.0
    assert [c.replica for _, c in t.live()] == ["a2"]
    assert t.swaps() == 1  # the stale incarnation's swaps stay in the alert rule's total


def test_the_bound_keeps_dropped_incarnations_in_the_sum() -> None:
    t = PoolTotals(max_replicas=2)
    for i in range(5):
        t.observe("cpu", _c(f"r{i}", 10, slot=i))
    assert t.swaps() == 50
