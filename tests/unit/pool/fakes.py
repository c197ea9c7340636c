"""Fakes for pure-logic tests: a settable clock and a byte-counting device memory."""

from __future__ import annotations

from fallbacks.clock import FakeClock

__all__ = ["FakeClock", "FakeDeviceMemory"]

from pool._private.device_memory import DeviceMemory, Region


class FakeDeviceMemory(DeviceMemory):
    """Counts bytes, no tensors; ``fail_next`` makes the next allocations report OOM."""

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity = capacity_bytes
        self.used = 0
        self.fail_next = 0
        self.allocations = 0

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def allocate(self, nbytes: int) -> Region | None:
        if self.fail_next:
            self.fail_next -= 1
            return None
        if self.used + nbytes > self._capacity:
            return None
        self.used += nbytes
        self.allocations += 1
        return Region(0, nbytes, None)

    def release(self, region: Region) -> None:
        self.used -= region.nbytes
