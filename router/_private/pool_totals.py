"""Pool replicas' counters as the ingress sees them, across replicas and their restarts.

The ingress polls one replica of each pool at a time (whichever the handle picks) and keeps the
latest :class:`pool.DeviceCounters` of every replica incarnation seen. From them come:

- the per-replica Prometheus series (incarnations seen within ``live_s``; a restarted replica's
  old series then goes stale, as Prometheus expects of a restarted target);
- the cumulative swap-ins for the swap-thrashing rule: the sum of the latest count of every
  incarnation, so a restart (a new incarnation counting from zero) never makes it go back;
- replica restarts for the replica-restarts rule: Ray Serve gives a replacement replica the rank
  (``slot``) of the one it replaces, so a new incarnation in a slot that had another one is a
  restart. (Scaling a pool down and up again reuses ranks too, and counts as well.)
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from pool import DeviceCounters

__all__ = ["PoolTotals"]


@dataclass(slots=True)
class _Seen:
    pool: str
    counters: DeviceCounters
    at: float


class PoolTotals:
    """Latest counters per replica incarnation (bounded: ``max_replicas``, oldest dropped)."""

    def __init__(self, *, max_replicas: int = 1024, live_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max, self._live_s, self._clock = max_replicas, live_s, clock
        self._last: OrderedDict[str, _Seen] = OrderedDict()
        self._slots: dict[tuple[str, int], str] = {}  # (pool, rank) -> its latest incarnation
        self._restarts: dict[str, int] = {}
        self._retired_swaps = 0  # swap-ins of incarnations dropped from the bound

    def observe(self, pool: str, c: DeviceCounters) -> None:
        if not c.replica:
            return
        self._restarts.setdefault(pool, 0)
        if c.replica not in self._last:  # a new incarnation (an old one reporting late is not)
            slot = (pool, c.slot)
            if slot in self._slots:
                self._restarts[pool] = self._restarts.get(pool, 0) + 1
            self._slots[slot] = c.replica
        prev = self._last.get(c.replica)
        if prev is not None and c.swaps_in < prev.counters.swaps_in:
            c = prev.counters  # an out-of-order reply: counters never go back
        self._last[c.replica] = _Seen(pool, c, self._clock())
        self._last.move_to_end(c.replica)
        if len(self._last) > self._max:
            self._retired_swaps += self._last.popitem(last=False)[1].counters.swaps_in

    def live(self) -> list[tuple[str, DeviceCounters]]:
        """(pool, counters) of every incarnation seen within ``live_s``."""
        now = self._clock()
        return [(s.pool, s.counters) for s in self._last.values() if now - s.at <= self._live_s]

    def swaps(self) -> int:
        """Swap-ins summed over every incarnation ever seen (cumulative)."""
        return self._retired_swaps + sum(s.counters.swaps_in for s in self._last.values())

    def restarts(self) -> dict[str, int]:
        """Replica restarts seen per pool (cumulative)."""
        return dict(self._restarts)
