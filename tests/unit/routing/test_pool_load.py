"""The ingress's pool-load board: every pool replica's latest stats, expiring; the aggregate the
spill and shedding decisions read (no Ray)."""

import pytest

from policies.priority import Priority
from policies.spill import decide_spill
from pool import RoutingStats
from router.pool_load import PoolLoadBoard, PoolLoads, least_wait_s
from tests.support.clocks import FakeClock

P = Priority.INTERACTIVE


def stats(replica: str, wait: float, at: float = 0.0) -> RoutingStats:
    return RoutingStats(device="cpu", resident=frozenset({"m@1"}), queue_delay_s=(0.0, wait, wait,
                        wait), queue_depth=(0, 1, 0, 0), memory_free_bytes=5,
                        memory_total_bytes=10, replica=replica, published_at=at)


def test_board_keeps_every_replica_not_just_the_last_polled():
    clock = FakeClock()
    board = PoolLoadBoard(ttl_s=5.0, clock=clock)
    board.observe([stats("a", 0.4, at=clock())])
    live = board.observe([stats("b", 0.05, at=clock())])  # the next poll reached the other one
    assert sorted(s.replica for s in live) == ["a", "b"]
    assert least_wait_s(live, P) == pytest.approx(0.05)


def test_newer_report_replaces_older_and_older_never_overwrites_newer():
    clock = FakeClock()
    board = PoolLoadBoard(ttl_s=5.0, clock=clock)
    board.observe([stats("a", 0.4, at=clock() - 1)])
    board.observe([stats("a", 0.1, at=clock())])
    assert [s.queue_delay_s[P] for s in board.live()] == [0.1]
    board.observe([stats("a", 0.9, at=clock() - 2)])  # a late poll answer with older stats
    assert [s.queue_delay_s[P] for s in board.live()] == [0.1]


def test_stale_reports_expire_so_a_dead_replica_stops_counting():
    clock = FakeClock()
    board = PoolLoadBoard(ttl_s=5.0, clock=clock)
    board.observe([stats("dead", 0.0, at=clock()), stats("busy", 0.6, at=clock())])
    clock.advance(3.0)
    board.observe([stats("busy", 0.6, at=clock())])
    assert least_wait_s(board.live(), P) == 0.0  # "dead" still within its ttl
    clock.advance(2.5)
    assert [s.replica for s in board.live()] == ["busy"]  # expired on read, too
    assert [s.replica for s in board.observe([])] == ["busy"]
    assert least_wait_s(board.live(), P) == pytest.approx(0.6)


def test_report_without_publish_time_counts_from_its_arrival():
    clock = FakeClock()
    board = PoolLoadBoard(ttl_s=2.0, clock=clock)
    board.observe([stats("a", 0.2)])
    clock.advance(1.5)
    assert len(board.live()) == 1
    clock.advance(1.0)
    assert board.live() == ()


def test_spill_on_the_aggregate_follows_the_least_loaded_replica():
    # One replica is swamped, the other idle: the router sends the request to the idle one, so
    # spilling because the last poll happened to reach the swamped one would be wrong.
    clock = FakeClock()
    board = PoolLoadBoard(ttl_s=5.0, clock=clock)
    live = board.observe([stats("swamped", 1.0, at=clock()), stats("idle", 0.01, at=clock())])
    d = decide_spill(gpu=list(live), priority=P, deadline_s=0.2, compute_s=0.01, target="cpu")
    assert d.where == "gpu"
    alone = decide_spill(gpu=[stats("swamped", 1.0)], priority=P, deadline_s=0.2,
                         compute_s=0.01, target="cpu")
    assert alone.where == "cpu"


def test_least_wait_without_reports_is_no_load_and_ttl_must_be_positive():
    assert least_wait_s((), P) == 0.0
    with pytest.raises(ValueError, match="ttl_s"):
        PoolLoadBoard(ttl_s=0.0)


def test_routing_stats_round_trip_through_the_published_dict():
    s = RoutingStats(device="cuda:0", resident=frozenset({"a@1"}), queue_delay_s=(0.1, 0.2, 0.3,
                     0.4), queue_depth=(1, 2, 3, 4), memory_free_bytes=7, memory_total_bytes=9,
                     hosted=frozenset({"b@2"}), replica="r1", swaps=3, row_cost_s={"a@1": 0.01},
                     published_at=123.5)
    assert RoutingStats.from_dict(s.to_dict()) == s


class FakePool:
    """A pool client whose poll reaches one replica and whose router here holds all of them."""

    def __init__(self, polled, held):
        self.polled, self.held = polled, held

    async def routing_stats(self):
        return self.polled

    def replica_stats(self):
        return list(self.held)


async def test_pool_loads_fold_the_poll_and_the_routers_view_per_pool():
    clock = FakeClock()
    busy = stats("a", 0.5, at=clock())
    full = RoutingStats(device="cpu", resident=frozenset(), queue_delay_s=(0.0,) * 4,
                        queue_depth=(0,) * 4, memory_free_bytes=1, memory_total_bytes=10,
                        replica="b", published_at=clock())
    loads = PoolLoads(ttl_s=5.0, clock=clock)
    assert loads.get("gpu") == ()
    await loads.refresh({"gpu": FakePool(busy, [busy, full])})
    assert sorted(s.replica for s in loads.get("gpu")) == ["a", "b"]
    assert least_wait_s(loads.get("gpu"), P) == 0.0
    # Both replicas report device "cpu": the fuller one's share is the pool's.
    assert loads.memory_used() == {"gpu:cpu": pytest.approx(0.9)}
    with pytest.raises(ValueError, match="ttl_s"):
        PoolLoads(ttl_s=-1.0)


async def test_a_pool_in_this_process_is_read_when_asked_not_at_the_last_refresh():
    clock = FakeClock()
    waits = [0.48]  # the device's queue: full at the refresh

    def now() -> RoutingStats:
        return stats("local", waits[0], at=clock())

    loads = PoolLoads(ttl_s=5.0, clock=clock, live_every_s=0.005, live_clock=clock)
    loads.read_live("cpu", now)
    await loads.refresh({"cpu": FakePool(now(), [])})
    assert least_wait_s(loads.get("cpu"), P) == pytest.approx(0.48)
    waits[0] = 0.02  # the triage refused what could not make it: the queue is short now
    assert least_wait_s(loads.get("cpu"), P) == pytest.approx(0.48)  # read under 5 ms ago
    clock.advance(0.006)
    assert least_wait_s(loads.get("cpu"), P) == pytest.approx(0.02)  # not a second later
    assert loads.memory_used() == {"cpu:cpu": pytest.approx(0.5)}  # the refresh still counts
    with pytest.raises(ValueError, match="live_every_s"):
        PoolLoads(live_every_s=-0.1)
