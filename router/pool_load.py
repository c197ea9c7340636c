"""The ingress's view of a pool's load: the latest ``RoutingStats`` of every pool replica.

Spill and shedding must read the load every ingress replica sees alike, not the stats of
whichever pool replica the last poll reached. The pools' request router in this process already
holds every pool replica's published stats (Ray Serve's controller fetches them from each replica
every ``request_routing_stats_period_s`` and broadcasts them to every router); the ingress folds
those, and its own poll's answer, into a :class:`PoolLoadBoard` keyed by the replica's
incarnation. A report older than ``ttl_s`` (by the replica's own ``published_at``; by arrival
when it has none) expires, so a dead or restarted replica stops counting within ``ttl_s``.

The aggregate the decisions read is the least-loaded live replica's estimated wait per class
(:func:`least_wait_s`): Ray's request router sends a request to the replica with the shortest
wait among those it ranks equal, so that is the wait the request should expect.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from policies.priority import Priority
from pool.types import RoutingStats

if TYPE_CHECKING:
    from router.pool_client import PoolClient

__all__ = ["PoolLoadBoard", "PoolLoads", "least_wait_s"]


@dataclass(frozen=True, slots=True)
class _Entry:
    stats: RoutingStats
    at: float  # wall-clock time the report counts from


class PoolLoadBoard:
    """Latest stats per pool replica, expiring after ``ttl_s`` seconds (injected ``clock``:
    wall-clock seconds, comparable with the replicas' ``published_at``)."""

    def __init__(self, *, ttl_s: float = 5.0, clock: Callable[[], float] = time.time) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        self.ttl_s, self._clock = ttl_s, clock
        self._entries: dict[str, _Entry] = {}

    def observe(self, reports: Iterable[RoutingStats]) -> tuple[RoutingStats, ...]:
        """Fold ``reports`` in (a newer report of a replica replaces its older one), drop
        expired entries, and return the live stats (rebuilt whole and assigned)."""
        now = self._clock()
        entries = dict(self._entries)
        for s in reports:
            key = s.replica or s.device
            at = s.published_at or now
            old = entries.get(key)
            if old is None or at >= old.at:
                entries[key] = _Entry(s, at)
        self._entries = {k: e for k, e in entries.items() if now - e.at <= self.ttl_s}
        return self.live()

    def live(self) -> tuple[RoutingStats, ...]:
        """The stats of every replica whose report has not expired, by replica key."""
        now = self._clock()
        return tuple(e.stats for _, e in sorted(self._entries.items())
                     if now - e.at <= self.ttl_s)


def least_wait_s(stats: Sequence[RoutingStats], priority: Priority) -> float:
    """The least-loaded replica's estimated wait for ``priority`` (0.0 with no reports: no
    evidence of load)."""
    return min((s.queue_delay_s[int(priority)] for s in stats), default=0.0)


class PoolLoads:
    """One :class:`PoolLoadBoard` per pool name, refreshed from the pools' clients: each
    refresh folds in the polled replica's stats and every replica's stats this process's
    request router holds (``PoolClient.replica_stats``).

    A pool in this process (``cpu_pool.placement: ingress``) is read where it is, when asked
    (:meth:`read_live`): at most every ``live_every_s`` (monotonic ``live_clock``), not once a
    refresh. Its queue turns over every forward; the refresh comes about once a second, and a
    wait read up to a second earlier, at a moment the queue was full, can go on shedding
    arrivals after the device's triage has emptied it: at 3x capacity the pipeline shed 70
    requests while the device sat idle 3.5 % of the level (docs/PERFORMANCE.md, fourteenth
    session)."""

    def __init__(self, *, ttl_s: float = 5.0, clock: Callable[[], float] = time.time,
                 live_every_s: float = 0.005,
                 live_clock: Callable[[], float] = time.monotonic) -> None:
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        if not live_every_s >= 0:
            raise ValueError(f"live_every_s must be >= 0, got {live_every_s!r}")
        self.ttl_s, self._clock = ttl_s, clock
        self.live_every_s, self._live_clock = live_every_s, live_clock
        self._boards: dict[str, PoolLoadBoard] = {}
        self._live: dict[str, tuple[RoutingStats, ...]] = {}
        self._sources: dict[str, Callable[[], RoutingStats]] = {}
        self._read: dict[str, tuple[float, tuple[RoutingStats, ...]]] = {}

    def read_live(self, pool: str, stats: Callable[[], RoutingStats]) -> None:
        """From now on :meth:`get` answers for ``pool`` with ``stats()``, called on the
        caller's thread (the pool's, which this process runs) at most every
        ``live_every_s``."""
        self._sources[pool] = stats
        self._read.pop(pool, None)

    async def refresh(self, pools: Mapping[str, PoolClient]) -> None:
        live = dict(self._live)
        for name, client in pools.items():
            board = self._boards.setdefault(name, PoolLoadBoard(ttl_s=self.ttl_s,
                                                                clock=self._clock))
            live[name] = board.observe([await client.routing_stats(), *client.replica_stats()])
        self._live = live

    def get(self, pool: str) -> tuple[RoutingStats, ...]:
        """The live stats of ``pool``'s replicas (empty before the first refresh); a pool read
        where it is (:meth:`read_live`): its stats now, or at most ``live_every_s`` ago."""
        source = self._sources.get(pool)
        if source is None:
            return self._live.get(pool, ())
        now = self._live_clock()
        read = self._read.get(pool)
        if read is None or now - read[0] >= self.live_every_s:
            read = self._read[pool] = (now, (source(),))
        return read[1]

    def memory_used(self) -> dict[str, float]:
        """Used share of device memory by ``"pool:device"``: the fullest replica's when several
        report the same device label (every GPU replica's is ``cuda:0``), so pressure on any
        one of them shows."""
        used: dict[str, float] = {}
        for pool, stats in self._live.items():
            for st in stats:
                if st.memory_total_bytes > 0:
                    k = f"{pool}:{st.device}"
                    used[k] = max(used.get(k, 0.0),
                                  1 - st.memory_free_bytes / st.memory_total_bytes)
        return used
