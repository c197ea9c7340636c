"""CPU affinity: the pure core plan, the topology reader and the slot claims (no Ray)."""

from __future__ import annotations

import os

import pytest

from pool._private.cpu_affinity import _claim, physical_cores, pin_replica, plan_cores, sockets


def test_plan_gives_disjoint_shares_one_logical_cpu_per_physical_core():
    cores = [[0, 4], [1, 5], [2, 6], [3, 7]]  # 4 cores with hyper-threads
    plans = [plan_cores(cores, 2, slot) for slot in range(2)]
    assert plans == [frozenset({0, 1}), frozenset({2, 3})]
    three = [plan_cores([[c] for c in range(7)], 3, slot) for slot in range(3)]
    assert three == [frozenset({0, 1, 2}), frozenset({3, 4}), frozenset({5, 6})]
    assert plan_cores(cores, 5, 0) is None  # fewer cores than replicas: leave it to the OS
    with pytest.raises(ValueError, match="slot must be in 0..1"):
        plan_cores(cores, 2, 2)


def test_topology_groups_hyperthreads_of_a_core(tmp_path):
    for cpu, core in ((0, 0), (1, 1), (2, 0), (3, 1)):
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{core}\n")
    assert physical_cores({0, 1, 2, 3}, sys_cpu=tmp_path) == [[0, 2], [1, 3]]
    assert physical_cores({0, 9}, sys_cpu=tmp_path) == [[0], [9]]  # 9: no topology
    assert sockets({0, 1, 2, 3}, sys_cpu=tmp_path) == 1
    (tmp_path / "cpu3" / "topology" / "physical_package_id").write_text("1\n")
    assert sockets({0, 1, 2, 3}, sys_cpu=tmp_path) == 2


def test_slots_are_claimed_once_and_freed_on_release(tmp_path):
    first, second = _claim(tmp_path, 2), _claim(tmp_path, 2)
    assert first is not None and second is not None and first[0] == 0 and second[0] == 1
    assert _claim(tmp_path, 2) is None
    first[1].close()
    again = _claim(tmp_path, 2)
    assert again is not None and again[0] == 0
    for handle in (second[1], again[1]):
        handle.close()


def test_pin_replica_pins_this_process_and_its_new_threads(tmp_path):
    import threading

    before = os.sched_getaffinity(0)
    if len(physical_cores(before)) < 2:
        pytest.skip("needs 2 physical cores to pin 2 replicas")
    assert pin_replica(tmp_path, 2, mode="off") is None
    pinning = pin_replica(tmp_path, 2, mode="on")
    try:
        assert pinning is not None and pinning.slot == 0
        assert os.sched_getaffinity(0) == set(pinning.cpus)
        seen = []
        t = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        t.start()
        t.join()
        assert seen == [set(pinning.cpus)]
    finally:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), before)
            except OSError:
                pass
        if pinning is not None:
            pinning.release()
    assert pin_replica(tmp_path, 1) is None  # one replica: nothing to split
