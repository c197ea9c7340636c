"""The one queue-delay model: the routing stats' wait and the scheduler's triage agree."""

import math

import pytest

from policies.device_queue import ModelView, RequestView, SchedulerSnapshot
from policies.estimates import MAX_PACE, PACE_HORIZON_S, Pace, ewma, queue_delay_by_class
from policies.priority import Priority
from policies.scheduling import PrioritySchedulingPolicy

R, I, B = Priority.REALTIME, Priority.INTERACTIVE, Priority.BATCH
NOW = 100.0


def test_ewma_takes_the_first_sample_whole_then_mixes_a_fifth():
    assert ewma(None, 2.0) == 2.0
    assert ewma(float("inf"), 2.0) == 2.0
    assert ewma(1.0, 2.0) == pytest.approx(1.2)


def _queue():
    a = ModelView("a@1", True, (RequestView(1, R, None, NOW, rows=4),), 64, row_cost_s=0.001)
    b = ModelView("b@1", False, (RequestView(2, R, None, NOW, rows=2),
                                 RequestView(3, B, None, NOW, rows=10)), 64,
                  row_cost_s=0.002, swap_cost_s=0.010)
    return a, b


def test_delay_per_class_counts_more_urgent_work_and_each_swap_once():
    delays = queue_delay_by_class(_queue())
    realtime = 4 * 0.001 + (0.010 + 2 * 0.002)  # b's swap once, with its first request
    assert delays[R] == pytest.approx(realtime)
    assert delays[I] == pytest.approx(realtime)
    assert delays[B] == pytest.approx(realtime + 10 * 0.002)  # the swap is not charged twice
    assert delays[Priority.BACKGROUND] == pytest.approx(delays[B])


@pytest.mark.parametrize("margin, expired", [(-1e-4, True), (1e-4, False)])
def test_triage_expires_exactly_where_the_published_wait_says_it_would_miss(margin, expired):
    a, b = _queue()
    wait = queue_delay_by_class((a, b))[I]
    own = 3 * a.row_cost_s  # the new request's own work on the resident model a
    new = RequestView(9, I, NOW + wait + own + margin, NOW, rows=3)
    a = ModelView(a.key, True, (*a.requests, new), 64, row_cost_s=a.row_cost_s)
    # b's batch request ranks after the new interactive one; only realtime work is ahead of it
    snap = SchedulerSnapshot(NOW, (a, ModelView(b.key, False, b.requests[:1], 64,
                                                row_cost_s=b.row_cost_s,
                                                swap_cost_s=b.swap_cost_s)))
    dropped, _ = PrioritySchedulingPolicy().triage(snap)
    assert (9 in dropped) is expired


def test_a_loading_models_disk_load_is_not_queue_delay_for_new_arrivals():
    r = RequestView(1, I, None, 0.0, 2)
    on_device = ModelView("a", False, (r,), 8, 0.0, 0.01, 0.5)
    off_loop = ModelView("a", False, (r,), 8, 0.0, 0.01, 0.5, loading=True)
    assert queue_delay_by_class([on_device])[I] == pytest.approx(0.52)
    assert queue_delay_by_class([off_loop])[I] == pytest.approx(0.02)


def test_pace_is_one_until_a_chunk_is_observed_then_wall_over_estimated_work():
    assert Pace().factor == 1.0
    assert Pace().observe(wall_s=0.006, work_s=0.002).factor == pytest.approx(3.0)
    # a chunk without an estimate (a model's first) teaches nothing
    assert Pace().observe(wall_s=0.5, work_s=0.0) == Pace()


def test_pace_never_claims_work_runs_faster_than_measured_nor_beyond_its_cap():
    assert Pace().observe(wall_s=0.001, work_s=0.002).factor == 1.0
    assert Pace().observe(wall_s=10.0, work_s=0.001).factor == MAX_PACE


def test_pace_weighs_a_stall_by_its_length_not_by_its_tiny_estimate():
    pace = Pace()
    for _ in range(100):  # 0.4 s busy, 2x behind
        pace = pace.observe(wall_s=0.004, work_s=0.002)
    stalled = pace.observe(wall_s=0.030, work_s=0.0001)  # one 30 ms stall of a 0.1 ms chunk
    decay = math.exp(-0.030 / PACE_HORIZON_S)
    assert stalled.factor == pytest.approx((pace.wall_s * decay + 0.030)
                                           / (pace.work_s * decay + 0.0001))
    assert 2.0 < stalled.factor < 2.5  # an average of ratios would have jumped towards 300x


def test_pace_forgets_over_its_horizon_of_busy_time():
    pace = Pace()
    for _ in range(250):  # 1 s busy, 5x behind (a disk load's thread taking the CPU)
        pace = pace.observe(wall_s=0.004, work_s=0.0008)
    assert pace.factor == pytest.approx(5.0)
    for _ in range(500):  # then 2 s at 1.5x
        pace = pace.observe(wall_s=0.003, work_s=0.002)
    assert 1.5 < pace.factor < 1.7


def test_published_wait_scales_with_the_pace():
    plain = queue_delay_by_class(_queue())
    behind = queue_delay_by_class(_queue(), pace=2.5)
    assert behind == pytest.approx(tuple(2.5 * d for d in plain))


@pytest.mark.parametrize("pace", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("margin, expired", [(-1e-4, True), (1e-4, False)])
def test_triage_at_a_pace_expires_exactly_where_the_published_wait_says_it_would_miss(
        pace, margin, expired):
    a, b = _queue()
    b = ModelView(b.key, False, b.requests[:1], 64, row_cost_s=b.row_cost_s,
                  swap_cost_s=b.swap_cost_s)
    wait = queue_delay_by_class((a, b), pace=pace)[I]
    own = 3 * a.row_cost_s * pace
    new = RequestView(9, I, NOW + wait + own + margin, NOW, rows=3)
    a = ModelView(a.key, True, (*a.requests, new), 64, row_cost_s=a.row_cost_s)
    dropped, _ = PrioritySchedulingPolicy().triage(SchedulerSnapshot(NOW, (a, b), pace=pace))
    assert (9 in dropped) is expired


def test_a_device_running_behind_refuses_on_arrival_what_it_would_finish_late():
    # 40 more urgent requests of 4 ms each ahead: 160 ms of measured compute, 320 ms at the
    # device's pace
    queued = tuple(RequestView(i, R, None, NOW - 0.01, rows=1) for i in range(40))
    new = RequestView(99, I, NOW + 0.25, NOW, rows=1)
    m = ModelView("a", True, (*queued, new), 1, row_cost_s=0.004)
    on_estimate, _ = PrioritySchedulingPolicy().triage(SchedulerSnapshot(NOW, (m,)))
    at_pace, _ = PrioritySchedulingPolicy().triage(SchedulerSnapshot(NOW, (m,), pace=2.0))
    assert 99 not in on_estimate  # the optimistic estimate would keep it until its deadline
    assert 99 in at_pace
