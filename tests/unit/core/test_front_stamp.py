"""router.front_stamp: a front proxy's X-Request-Start, in each unit its senders use."""

import pytest

from router.front_stamp import front_wait_s, stamp_s

NOW = 1_800_000_000.0


@pytest.mark.parametrize(("raw", "unix_s"), [
    ("t=1800000000.125", 1800000000.125),  # seconds with a fraction (nginx's ${msec})
    ("1800000000", 1800000000.0),  # no "t="
    ("t=1800000000125", 1800000000.125),  # milliseconds
    (" t=1800000000125000 ", 1800000000.125),  # microseconds (Apache's %t), spaces around
    ("t=1800000000125000000", 1800000000.125),  # nanoseconds
])
def test_each_unit_reads_as_unix_seconds(raw, unix_s) -> None:
    assert stamp_s(raw) == pytest.approx(unix_s, abs=1e-6)


@pytest.mark.parametrize("raw", ["", "t=", "t=soon", "t=0", "t=-1", "t=nan", "t=inf", "x=1"])
def test_what_is_not_a_time_is_none(raw) -> None:
    assert stamp_s(raw) is None


def test_the_wait_is_bounded_by_now_and_the_age_limit() -> None:
    assert front_wait_s("t=1799999999.75", now_s=NOW, max_age_s=30.0) == pytest.approx(0.25)
    assert front_wait_s("t=1800000001", now_s=NOW, max_age_s=30.0) == 0.0  # a clock behind
    assert front_wait_s("t=1799999970", now_s=NOW, max_age_s=30.0) == pytest.approx(30.0)
    assert front_wait_s("t=1799999969.9", now_s=NOW, max_age_s=30.0) is None  # too old
    assert front_wait_s("t=what", now_s=NOW, max_age_s=30.0) is None
