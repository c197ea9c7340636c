"""Cumulative pool counters as the ingress sees them, across replicas and their restarts.

The ingress polls one replica of each pool at a time (whichever the handle picks), so a total is
the sum of the latest count of every replica incarnation seen: a replica that restarts reports
from zero under a new incarnation, and the old one's count stays in the sum (alert rules read
cumulative counters and their increase).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from pool import RoutingStats

__all__ = ["SwapTotals"]


class SwapTotals:
    """Swap-ins summed over every pool replica incarnation seen (bounded: ``max_replicas``)."""

    def __init__(self, *, max_replicas: int = 1024) -> None:
        self._max = max_replicas
        self._last: OrderedDict[str, int] = OrderedDict()
        self._retired = 0  # counts of incarnations dropped from the bound, kept in the sum

    def observe(self, stats: Iterable[RoutingStats]) -> None:
        for st in stats:
            if not st.replica:
                continue
            self._last[st.replica] = max(st.swaps, self._last.get(st.replica, 0))
            self._last.move_to_end(st.replica)
            if len(self._last) > self._max:
                self._retired += self._last.popitem(last=False)[1]

    def total(self) -> int:
        return self._retired + sum(self._last.values())
