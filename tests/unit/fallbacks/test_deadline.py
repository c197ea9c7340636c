import pytest

from fallbacks.deadline import Deadline, resolve_deadline_ms


def test_resolution_order_request_then_model_then_app():
    assert resolve_deadline_ms(request_ms=50, model_ms=200, app_default_ms=1000) == 50
    assert resolve_deadline_ms(request_ms=None, model_ms=200, app_default_ms=1000) == 200
    assert resolve_deadline_ms(request_ms=None, model_ms=None, app_default_ms=1000) == 1000


def test_resolution_rejects_non_positive_naming_the_field():
    with pytest.raises(ValueError, match="model.deadline_ms"):
        resolve_deadline_ms(request_ms=None, model_ms=0, app_default_ms=1000)
    with pytest.raises(ValueError, match="app_default_deadline_ms"):
        resolve_deadline_ms(request_ms=None, model_ms=None, app_default_ms=-1)


def test_remaining_and_expiry_follow_the_clock(clock):
    d = Deadline.for_request(request_ms=None, model_ms=250, app_default_ms=1000, clock=clock)
    assert d.remaining() == pytest.approx(0.25)
    assert d.remaining_ms() == pytest.approx(250)
    assert not d.expired()
    clock.advance(0.2)
    assert d.remaining() == pytest.approx(0.05)
    clock.advance(0.05)
    assert d.expired()
    assert d.remaining() == 0.0
    clock.advance(1.0)
    assert d.remaining() == 0.0  # never negative


def test_budget_keeps_the_margin_and_is_never_negative(clock):
    d = Deadline.after_ms(100, clock=clock)
    assert d.budget(margin_s=0.03) == pytest.approx(0.07)
    clock.advance(0.08)
    assert d.budget(margin_s=0.03) == 0.0
    with pytest.raises(ValueError, match="margin_s"):
        d.budget(margin_s=-0.01)


def test_child_deadline_is_inside_parent_and_capped(clock):
    d = Deadline.after_ms(100, clock=clock)
    c = d.child(margin_s=0.02)
    assert c.at == pytest.approx(d.at - 0.02)
    capped = d.child(margin_s=0.02, cap_s=0.01)
    assert capped.remaining() == pytest.approx(0.01)
    clock.advance(0.09)
    late = d.child(margin_s=0.02)  # margin larger than what is left: expires now, not before
    assert late.at == pytest.approx(clock())
    assert late.expired()


def test_after_ms_rejects_non_positive():
    with pytest.raises(ValueError, match="deadline_ms"):
        Deadline.after_ms(0)


def test_for_request_counts_from_arrival_when_given():
    now = [10.0]
    d = Deadline.for_request(request_ms=500, model_ms=None, app_default_ms=1000,
                             clock=lambda: now[0], arrival_s=9.8)
    assert d.at == 10.3 and d.remaining() == 0.3  # 200 ms already spent queueing in front
    late = Deadline.for_request(request_ms=100, model_ms=None, app_default_ms=1000,
                                clock=lambda: now[0], arrival_s=9.0)
    assert late.expired() and late.remaining() == 0.0
    assert Deadline.for_request(request_ms=None, model_ms=None, app_default_ms=1000,
                                clock=lambda: now[0]).at == 11.0
