"""The one queue-delay model: the routing stats' wait and the scheduler's triage agree."""

import pytest

from policies.estimates import ewma, queue_delay_by_class
from policies.priority import Priority
from policies.scheduling import ModelView, PrioritySchedulingPolicy, RequestView, SchedulerSnapshot

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
