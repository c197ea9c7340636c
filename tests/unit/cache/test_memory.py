import numpy as np

from router.cache import CachedAnswer
from router.cache._private.memory import MemoryLRU


def ans(n=4):
    return CachedAnswer(outputs={"y": np.zeros(n, dtype=np.uint8)}, served_by="s")


def test_entry_bound_evicts_least_recent(clock):
    lru = MemoryLRU(max_entries=2, max_bytes=1000, clock=clock)
    lru.put("a", ans(), ttl_s=10, nbytes=4)
    lru.put("b", ans(), ttl_s=10, nbytes=4)
    assert lru.get("a") is not None  # a is now most recent
    lru.put("c", ans(), ttl_s=10, nbytes=4)
    assert lru.get("b") is None and lru.get("a") is not None and lru.get("c") is not None
    assert len(lru) == 2


def test_byte_bound(clock):
    lru = MemoryLRU(max_entries=100, max_bytes=10, clock=clock)
    assert lru.put("a", ans(4), ttl_s=10, nbytes=4)
    assert lru.put("b", ans(4), ttl_s=10, nbytes=4)
    assert lru.put("c", ans(4), ttl_s=10, nbytes=4)
    assert lru.nbytes <= 10 and lru.get("a") is None
    assert not lru.put("huge", ans(11), ttl_s=10, nbytes=11)
    assert lru.get("huge") is None


def test_ttl_with_injected_clock(clock):
    lru = MemoryLRU(max_entries=10, max_bytes=100, clock=clock)
    lru.put("a", ans(), ttl_s=5, nbytes=4)
    clock.advance(4.9)
    assert lru.get("a") is not None
    clock.advance(0.2)
    assert lru.get("a") is None and len(lru) == 0 and lru.nbytes == 0


def test_overwrite_updates_bytes(clock):
    lru = MemoryLRU(max_entries=10, max_bytes=100, clock=clock)
    lru.put("a", ans(), ttl_s=5, nbytes=40)
    lru.put("a", ans(), ttl_s=5, nbytes=10)
    assert lru.nbytes == 10 and len(lru) == 1
