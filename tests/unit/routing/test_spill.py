"""Spill decisions on RoutingStats snapshots (no Ray, no workers) and their hysteresis."""

import pytest

from policies.priority import Priority
from policies.spill import SpillConfig, SpillState, decide_spill, estimate_wait_s
from pool import RoutingStats

P = Priority.INTERACTIVE


def stats(*delay: float, device: str = "cpu") -> RoutingStats:
    d = tuple(delay) + (delay[-1],) * (4 - len(delay))
    return RoutingStats(device=device, resident=frozenset(), queue_delay_s=d,
                        queue_depth=(0, 0, 0, 0), memory_free_bytes=0, memory_total_bytes=0)


def test_estimate_uses_best_replica_for_the_priority():
    snap = [stats(0.0, 0.5, 1.0, 2.0), stats(0.1, 0.2, 3.0, 3.0)]
    assert estimate_wait_s(snap, Priority.INTERACTIVE, 0.01) == pytest.approx(0.21)
    assert estimate_wait_s(snap, Priority.REALTIME, 0.01) == pytest.approx(0.01)
    assert estimate_wait_s([], P, 0.01) == float("inf")


def test_idle_gpu_stays_on_gpu():
    d = decide_spill(gpu=[stats(0.01)], priority=P, deadline_s=0.2, compute_s=0.01, target="cpu")
    assert d.where == "gpu" and not d.spilled and not d.state.spilling


def test_overloaded_gpu_spills_to_the_configured_target():
    gpu = [stats(0.5)]
    to_cpu = decide_spill(gpu=gpu, priority=P, deadline_s=0.2, compute_s=0.01, target="cpu",
                          now=7.0)
    assert to_cpu.where == "cpu" and to_cpu.code == "entered"
    assert to_cpu.state == SpillState(True, 7.0)
    assert "entered spill to cpu" in to_cpu.reason and to_cpu.pressure == pytest.approx(2.55)
    to_cheap = decide_spill(gpu=gpu, priority=P, deadline_s=0.2, compute_s=0.01, target="cheap")
    assert to_cheap.where == "cheap" and "cheap model" in to_cheap.reason


def test_route_without_spill_or_request_without_deadline_never_spills():
    gpu = [stats(5.0)]
    d = decide_spill(gpu=gpu, priority=P, deadline_s=0.2, compute_s=0.0, target="none")
    assert (d.where, d.code) == ("gpu", "no-spill")
    d = decide_spill(gpu=gpu, priority=P, deadline_s=None, compute_s=0.0, target="cpu")
    assert (d.where, d.code, d.reason) == ("gpu", "no-deadline", "no deadline")


def test_priority_decides_which_queue_counts():
    gpu = [stats(0.0, 0.0, 1.0, 1.0)]  # only batch/background work is queued deep
    hi = decide_spill(gpu=gpu, priority=Priority.INTERACTIVE, deadline_s=0.2, compute_s=0.01,
                      target="cpu")
    lo = decide_spill(gpu=gpu, priority=Priority.BATCH, deadline_s=0.2, compute_s=0.01,
                      target="cpu")
    assert hi.where == "gpu" and lo.where == "cpu"


def test_overloaded_cpu_pool_still_takes_the_spill_but_says_so():
    d = decide_spill(gpu=[stats(0.5)], priority=P, deadline_s=0.2, compute_s=0.01, target="cpu",
                     cpu=[stats(0.9)])
    assert d.where == "cpu" and not d.alt_meets_deadline and "would miss too" in d.reason
    ok = decide_spill(gpu=[stats(0.5)], priority=P, deadline_s=0.2, compute_s=0.01,
                      target="cpu", cpu=[stats(0.05)], cpu_compute_s=0.03, state=d.state)
    assert ok.where == "cpu" and ok.alt_meets_deadline and ok.alt_wait_s == pytest.approx(0.08)
    assert ok.code == "holding"


def test_cpu_then_cheap_falls_to_cheap_when_cpu_would_miss():
    kw = {"gpu": [stats(0.5)], "priority": P, "deadline_s": 0.2, "compute_s": 0.01,
          "target": "cpu-then-cheap", "config": SpillConfig(high=0.8, low=0.5)}
    assert decide_spill(cpu=[stats(0.1)], **kw).where == "cpu"  # 0.11 <= 0.16
    d = decide_spill(cpu=[stats(0.2)], **kw)  # 0.21 > 0.16
    assert d.where == "cheap" and "cpu wait 0.210s would miss" in d.reason
    assert decide_spill(cpu=None, **kw).where == "cpu"  # no estimate: trust the cpu pool


def test_hysteresis_does_not_flap_inside_the_band():
    cfg = SpillConfig(high=1.0, low=0.6)
    deadline = 1.0
    waits = [0.5, 0.9, 1.1, 0.9, 0.7, 0.61, 0.59, 0.9, 0.99, 1.01]
    want = ["gpu", "gpu", "cpu", "cpu", "cpu", "cpu", "gpu", "gpu", "gpu", "cpu"]
    state = SpillState()
    got = []
    for i, w in enumerate(waits):
        d = decide_spill(gpu=[stats(w)], priority=P, deadline_s=deadline, compute_s=0.0,
                         target="cpu", state=state, config=cfg, now=float(i))
        got.append(d.where)
        state = d.state
    assert got == want
    assert state == SpillState(True, 9.0)
    assert SpillConfig() == SpillConfig(high=0.8, low=0.5)  # defaults leave estimate headroom


def test_spill_start_time_is_kept_while_holding():
    s = SpillState()
    for t in (1.0, 2.0, 3.0):
        s = decide_spill(gpu=[stats(2.0)], priority=P, deadline_s=1.0, compute_s=0.0,
                         target="cheap", state=s, now=t).state
    assert s.since == 1.0


def test_bad_config_and_inputs_name_the_field():
    with pytest.raises(ValueError, match="low < high"):
        SpillConfig(high=0.5, low=0.7)
    with pytest.raises(ValueError, match="target must be one of cpu, cheap, cpu-then-cheap"):
        decide_spill(gpu=[stats(0.0)], priority=P, deadline_s=1.0, compute_s=0.0, target="gpu")
    with pytest.raises(ValueError, match="compute_s"):
        decide_spill(gpu=[stats(0.0)], priority=P, deadline_s=1.0, compute_s=-1, target="cpu")


@pytest.mark.parametrize("left", [0.0, -0.01])
def test_spent_budget_spills_instead_of_raising(left):
    # A cascade whose cheap answer came from the cache after the deadline reaches the spill
    # decision with no time left: that is a decision (spill), not a ValueError (a 500).
    d = decide_spill(gpu=[stats(0.0)], priority=P, deadline_s=left, compute_s=0.0,
                     target="cheap")
    assert d.where == "cheap" and d.pressure == float("inf")
    none = decide_spill(gpu=[stats(0.0)], priority=P, deadline_s=left, compute_s=0.0,
                        target="none")
    assert none.where == "gpu"
