"""Memory manager with a fake device and a fake clock: residency, eviction, OOM retries."""

import pytest

from policies.eviction import LruEviction
from policies.priority import Priority
from pool._private.device_memory import ArenaMemory
from pool._private.memory import MemoryManager
from pool.errors import DeviceOutOfMemory
from tests.support.clocks import FakeClock
from tests.support.pool import FakeDeviceMemory

I, G, R = Priority.INTERACTIVE, Priority.BACKGROUND, Priority.REALTIME


class Recorder:
    def __init__(self):
        self.evicted = []

    def __call__(self, key):
        self.evicted.append(key)


def admit(mm, key, nbytes=100, priority=I, queued=None, evict=None):
    return mm.admit(key, nbytes, priority=priority, reload_cost_s=0.01, queued=queued or {},
                    evict=evict or Recorder())


def make(capacity=300, reserve=0, policy=None):
    clock = FakeClock()
    return MemoryManager(FakeDeviceMemory(capacity), reserve_bytes=reserve, policy=policy,
                         clock=clock), clock


def test_reserve_is_kept_for_activations():
    mm, _ = make(capacity=300, reserve=100)
    assert mm.capacity_bytes == 200
    admit(mm, "a"), admit(mm, "b")
    rec = Recorder()
    admit(mm, "c", evict=rec)
    assert rec.evicted == ["a"] and mm.used_bytes == 200 and mm.free_bytes == 0


def test_evicts_least_recently_used_first():
    mm, clock = make()
    for k in "abc":
        admit(mm, k)
        clock.advance(1)
    mm.touch("a")
    rec = Recorder()
    admit(mm, "d", evict=rec)
    assert rec.evicted == ["b"]
    assert sorted(mm.resident_keys()) == ["a", "c", "d"]
    assert mm.evictions == 1


def test_lower_class_is_evicted_before_a_more_recent_higher_one():
    mm, clock = make()
    admit(mm, "bg", priority=G)
    clock.advance(1)
    admit(mm, "x1"), admit(mm, "x2")
    rec = Recorder()
    admit(mm, "new", evict=rec)
    assert rec.evicted == ["bg"]


def test_running_model_is_never_evicted():
    mm, clock = make(capacity=200)
    admit(mm, "a")
    clock.advance(1)
    admit(mm, "b")
    rec = Recorder()
    with mm.running("a"):
        admit(mm, "c", evict=rec)
    assert rec.evicted == ["b"] and mm.is_resident("a")
    with mm.running("a"), mm.running("c"), pytest.raises(
        DeviceOutOfMemory, match="not enough evictable"
    ):
        admit(mm, "d")
    assert sorted(mm.resident_keys()) == ["a", "c"]


def test_pinned_model_is_never_evicted():
    mm, _ = make(capacity=100)
    admit(mm, "a")
    mm.pin("a")
    with pytest.raises(DeviceOutOfMemory):
        admit(mm, "b")
    mm.unpin("a")
    admit(mm, "b")
    assert mm.resident_keys() == ["b"]


def test_too_big_for_the_device_raises_naming_the_model():
    mm, _ = make(capacity=100)
    with pytest.raises(DeviceOutOfMemory, match="huge needs 500 bytes"):
        admit(mm, "huge", nbytes=500)


def test_queued_higher_class_work_protects_a_model_from_a_lower_requester():
    mm, _ = make(capacity=100)
    admit(mm, "rt-model")
    with pytest.raises(DeviceOutOfMemory):
        admit(mm, "bg-model", priority=G, queued={"rt-model": R})
    rec = Recorder()
    admit(mm, "rt2", priority=R, queued={"rt-model": R}, evict=rec)
    assert rec.evicted == ["rt-model"]


def test_allocation_failure_evicts_one_more_and_retries():
    mm, clock = make(capacity=300)
    admit(mm, "a")
    clock.advance(1)
    admit(mm, "b")
    mm.memory.fail_next = 1  # e.g. CUDA OOM despite the accounting saying it fits
    rec = Recorder()
    admit(mm, "c", evict=rec)
    assert rec.evicted == ["a"] and sorted(mm.resident_keys()) == ["b", "c"]


def test_allocation_failure_with_nothing_to_evict_raises():
    mm, _ = make(capacity=300)
    mm.memory.fail_next = 5
    with pytest.raises(DeviceOutOfMemory, match="allocation of 100 bytes failed"):
        admit(mm, "a")


def test_arena_fragmentation_is_resolved_by_evicting_more():
    # 3 slots of 256 bytes; free the middle one and ask for 512 contiguous bytes.
    mm = MemoryManager(ArenaMemory(768), policy=LruEviction(), clock=FakeClock())
    for k in "abc":
        admit(mm, k, nbytes=256)
    mm.release("b")
    rec = Recorder()
    region = admit(mm, "big", nbytes=512, evict=rec)
    assert rec.evicted == ["a"] and region.offset == 0 and region.tensor.numel() == 512


def test_bad_reserve_is_rejected():
    with pytest.raises(ValueError, match="reserve_bytes"):
        MemoryManager(FakeDeviceMemory(100), reserve_bytes=100)
