from pool import RoutingStats
from router._private.pool_totals import SwapTotals


def _stats(replica: str, swaps: int) -> RoutingStats:
    return RoutingStats(device="cpu", resident=frozenset(), queue_delay_s=(0.0,) * 4,
                        queue_depth=(0,) * 4, memory_free_bytes=1, memory_total_bytes=2,
                        replica=replica, swaps=swaps)


def test_totals_sum_replicas_and_keep_a_restarted_replicas_old_count() -> None:
    t = SwapTotals()
    t.observe([_stats("a", 5)])
    t.observe([_stats("b", 3)])
    t.observe([_stats("a", 7)])
    assert t.total() == 10
    t.observe([_stats("a2", 1)])  # "a" restarted: a new incarnation counts from zero
    assert t.total() == 11
    t.observe([_stats("a", 2)])  # a stale, lower report never makes the total go back
    assert t.total() == 11


def test_the_bound_keeps_dropped_incarnations_in_the_sum() -> None:
    t = SwapTotals(max_replicas=2)
    for i in range(5):
        t.observe([_stats(f"r{i}", 10)])
    assert t.total() == 50
