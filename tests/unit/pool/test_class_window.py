"""``pool.ClassWindow``: per-class counts and latency percentiles over a sliding window."""

from __future__ import annotations

import pytest

from policies.priority import Priority
from pool import ClassWindow
from tests.support.clocks import FakeClock


def _window(clock: FakeClock) -> ClassWindow:
    return ClassWindow(series=("queue", "compute"), counters=("refused",), slots=5, slot_s=6.0,
                       clock=clock)


def test_percentiles_rates_and_counts_per_class() -> None:
    clock = FakeClock(600.0)  # a slot boundary: the window covers exactly what has passed
    w = _window(clock)
    for i in range(100):  # realtime: 1..100 ms queue wait, 2 ms compute, over 10 s
        clock.set(600.0 + i * 0.1)
        w.observe(Priority.REALTIME, ((i + 1) / 1e3, 0.002))
    for _ in range(10):
        w.observe(Priority.BATCH, (0.5, 0.04))
    w.count(Priority.BATCH, 0)
    w.count(Priority.BATCH, 0)
    clock.set(610.0)
    snap = w.snapshot()
    assert snap["window_s"] == 10.0
    rt, batch = snap["by_class"]["realtime"], snap["by_class"]["batch"]
    assert rt["requests"] == 100 and rt["rate_per_s"] == 10.0 and rt["refused"] == 0
    # nearest-rank percentiles, read within the buckets' 6 %
    assert rt["queue_ms"]["p50"] == pytest.approx(50.0, rel=0.06)
    assert rt["queue_ms"]["p99"] == pytest.approx(99.0, rel=0.06)
    assert rt["queue_ms"]["mean"] == pytest.approx(50.5)  # kept exactly (a sum per slot)
    assert rt["compute_ms"]["p50"] == pytest.approx(2.0, rel=0.06)
    assert batch["requests"] == 10 and batch["refused"] == 2
    assert batch["queue_ms"]["p99"] == pytest.approx(500.0, rel=0.06)
    empty = snap["by_class"]["background"]
    assert empty["requests"] == 0 and empty["rate_per_s"] == 0.0 and empty["refused"] == 0
    assert empty["queue_ms"] == {"p50": None, "p99": None, "mean": None}


def test_old_slots_leave_the_window() -> None:
    clock = FakeClock(600.0)
    w = _window(clock)
    w.observe(Priority.REALTIME, (1.0, 1.0))  # slow, early
    clock.set(620.0)
    for _ in range(3):
        w.observe(Priority.REALTIME, (0.001, 0.001))
    w.count(Priority.REALTIME, 0)
    clock.set(635.9)  # the early slot [600, 606) is still inside the last 5 whole slots + this
    rt = w.snapshot()["by_class"]["realtime"]
    assert rt["requests"] == 4 and rt["queue_ms"]["p99"] == pytest.approx(1000.0, rel=0.06)
    clock.set(636.0)  # now it is out: only the later requests remain
    snap = w.snapshot()
    rt = snap["by_class"]["realtime"]
    assert rt["requests"] == 3 and rt["refused"] == 1
    assert rt["queue_ms"]["p99"] == pytest.approx(1.0, rel=0.06)
    assert snap["window_s"] == 30.0  # 5 whole slots and the current one, just begun
    assert rt["rate_per_s"] == pytest.approx(3 / 30.0)
    clock.set(700.0)  # long idle: everything is out
    rt = w.snapshot()["by_class"]["realtime"]
    assert rt["requests"] == 0 and rt["refused"] == 0 and rt["queue_ms"]["p50"] is None


def test_memory_is_fixed_whatever_the_number_of_requests() -> None:
    clock = FakeClock(0.0)
    w = _window(clock)
    sizes = ([len(h) for h in w._hist], [len(c) for c in w._counts])
    for i in range(20_000):
        clock.set(i * 0.01)
        w.observe(i % 4, (1e-7 * i, 1e4))  # below and above the buckets' range too
    assert ([len(h) for h in w._hist], [len(c) for c in w._counts]) == sizes
    snap = w.snapshot()["by_class"]["realtime"]
    assert 9e5 < snap["compute_ms"]["p99"] <= 1e6  # counted in the last bucket (1000 s)


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="slots"):
        ClassWindow(series=("x",), slots=0)
    with pytest.raises(ValueError, match="series"):
        ClassWindow(series=())


def test_observations_kept_aside_read_as_if_each_was_recorded_at_once() -> None:
    """A window that folds observations in batches reads what one recording each at once
    shows, at every read, across slot boundaries and with counts in between (each
    observation lands in the slot of its own time, and counts after what came before)."""
    clocks = FakeClock(600.0), FakeClock(600.0)
    at_once = ClassWindow(series=("queue", "compute"), counters=("refused",), clock=clocks[0],
                          fold_at=1)
    folded = ClassWindow(series=("queue", "compute"), counters=("refused",), clock=clocks[1],
                         fold_at=16)
    for i in range(500):
        t = 600.0 + i * 0.09  # 45 s: slots begin and fall out of the window meanwhile
        for c in clocks:
            c.set(t)
        cls = Priority(i % 4)
        for w in (at_once, folded):
            w.observe(cls, ((i % 37 + 1) / 1e4, (i % 11 + 1) / 1e3))
            if i % 29 == 0:
                w.count(cls, 0)
        if i % 13 == 0:
            assert folded.snapshot() == at_once.snapshot()
    assert folded.snapshot() == at_once.snapshot()
    with pytest.raises(ValueError, match="fold_at"):
        ClassWindow(series=("queue",), fold_at=0)
