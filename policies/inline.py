"""When a CPU pool runs a chunk on its event loop instead of its device thread, and with how
many intra-op threads a small chunk runs (pure functions:
the pool's chunk runner, ``pool._private.chunk``, asks them; ``DeviceSpec.inline_ms`` and
``inline_bounded_only`` say what the settings mean), and whether an arrival at such an idle
device waits for the rest of its event-loop tick (``TickGather``, kept by the worker).

Waiting for the tick. A small model on the CPU runs inline, on the event loop, the moment it arrives
(``BatchBuilder.runs_inline``): with nothing in flight there is never a queue, so 16 concurrent
callers cost 16 forward passes and 16 launches. But concurrent callers' requests arrive in
bunches: one ``select()`` wakes several sockets (or one ``Ingress.infer_many`` call carries
several requests), and their tasks all run in the loop's next iteration. Deferring the launch
by one ``call_soon`` lets every request of that iteration join the queue first, so the pump
launches them as one batch: one forward, one launch, one completion.

The deferral costs a lone caller a loop iteration and a task switch (about 10 us in
``benchmarks.ingress_asgi --concurrency 1``). So the device gathers only while it pays: after
``LONE_TICKS`` gathered ticks in a row that found one request each, arrivals launch at once
again, and each such tick is watched (one ``call_soon``, no task switch) for a second arrival;
the first tick that has one turns gathering back on, from that arrival on.

Waiting for the thread. A chunk runs inline only with nothing in flight: never beside a batch on
the device thread. A chunk that could run inline but found the thread busy used to follow it
there, and so did the arrivals behind it: at 16 concurrent callers there was nearly always a
batch in flight, and the pool stayed on the thread, paying a hop per chunk, until a lull emptied
it. From one run of ``benchmarks.http_throughput`` to the next it ran 0.33-0.97 of its chunks
inline, and its throughput followed (docs/PERFORMANCE.md, "The thread fed itself"). Such a chunk
now waits for the one batch running on the thread (``waits_for_the_thread``), then runs inline
with every row that arrived meanwhile. It waits for no more than it would have on the thread,
where it would have started after that batch too; it does not wait behind a second batch
(with one running and one waiting to start, it is launched, and may displace the waiting one).
"""

from __future__ import annotations

import enum

__all__ = ["INLINE_AFTER_RUNS", "INLINE_STALL", "INLINE_THREADS", "LONE_TICKS",
           "ONE_THREAD_BELOW_S", "Arrival", "TickGather", "intra_op_threads", "is_stall",
           "waits_for_the_thread"]

INLINE_AFTER_RUNS = 3  # device-thread runs measured before a model may run inline
INLINE_STALL = 10.0  # a chunk this many times inline_ms disqualifies the model from inline
# A CPU chunk whose forward is estimated under this runs with one intra-op thread, inline or on
# the device thread: a parallel region wakes torch's OpenMP pool, which under
# OMP_WAIT_POLICY=PASSIVE (deploy.ray_env) made a 5-row, 64-wide linear layer take about 60 µs
# instead of 5, and longer while the other cores were busy; that wake is over a tenth of work
# this small (docs/PERFORMANCE.md, "The small forwards woke a second thread").
ONE_THREAD_BELOW_S = 0.5e-3
# An inline chunk always runs with one: it is small by definition (at most inline_ms), and the
# loop thread would wait for the thread it wakes. A per-row estimate also over-counted larger
# chunks of a forward that is mostly a fixed cost: on a busy loop digits-small's forward took
# 130-300 µs of CPU a chunk whatever its rows (12-25 µs alone, caches hot), the ingress's pool
# estimated 40-60 µs a row, and one chunk in seven, the 10-row ones, was estimated over
# ONE_THREAD_BELOW_S and ran on two threads (docs/PERFORMANCE.md, "The thread fed itself");
# the estimate is now a fixed part plus a part per row (policies.estimates.ChunkCost).
INLINE_THREADS = 1


def intra_op_threads(forward_cpu_s: float, device_threads: int) -> int:
    """Torch intra-op threads for a CPU chunk whose forward is estimated at ``forward_cpu_s``
    of CPU (what a second thread could share: a model that sleeps has none to share).

    >>> intra_op_threads(20e-6, 8)
    1
    >>> intra_op_threads(2e-3, 8)
    8
    """
    return 1 if forward_cpu_s < ONE_THREAD_BELOW_S else device_threads


def is_stall(took_s: float, inline_cpu_s: float | None, inline_s: float, *,
             bounded_only: bool) -> bool:
    """Does a chunk that took ``took_s`` (``inline_cpu_s`` of the loop thread's CPU when it ran
    inline, else None) disqualify its model from inline for good?

    Any chunk over ``INLINE_STALL`` x ``inline_s`` does, so a hang blocks the loop at most once.
    With ``bounded_only`` only an inline chunk that spent that long on the CPU does: a bounded
    graph cannot sleep, so a slow chunk that did not compute was the host's doing (the thread
    preempted, or waiting for the GIL), and a slow chunk on the device thread never blocked the
    loop.

    >>> is_stall(0.06, None, 0.005, bounded_only=False)
    True
    >>> is_stall(0.06, 0.001, 0.005, bounded_only=True)
    False
    """
    limit = INLINE_STALL * inline_s
    if not inline_s or took_s <= limit:
        return False
    return not bounded_only or (inline_cpu_s or 0.0) > limit

LONE_TICKS = 8


class Arrival(enum.Enum):
    GATHER = "gather"  # wait for the tick; the caller schedules its end (``gathered``)
    JOIN = "join"  # wait for the tick already scheduled
    NOW = "now"  # launch at once
    NOW_WATCH = "now_watch"  # launch at once; the caller schedules ``tick_over`` for this tick


class TickGather:
    """The deferral's state (see the module's docstring): ``arrive()`` for each arrival at an
    idle device; ``gathered(n)`` when a gathered tick ends, with the requests it found queued;
    ``tick_over()`` when a watched tick ends."""

    __slots__ = ("lone", "pending", "seen", "watching")

    def __init__(self) -> None:
        self.pending = False  # a gathered tick's launch is scheduled
        self.lone = 0  # gathered ticks in a row that found a single request
        self.watching = False  # a watched tick's end is scheduled
        self.seen = 0  # arrivals in the watched tick

    def arrive(self) -> Arrival:
        if self.pending:
            return Arrival.JOIN
        if self.lone < LONE_TICKS:
            self.pending = True
            return Arrival.GATHER
        self.seen += 1
        if self.seen >= 2:  # company in one tick: gather again, from this arrival on
            self.lone = 0
            self.pending = True
            return Arrival.GATHER
        if self.watching:
            return Arrival.NOW
        self.watching = True
        return Arrival.NOW_WATCH

    def gathered(self, n: int) -> None:
        """``n``: the requests queued when the tick ran (0: a pump already launched them)."""
        self.pending = False
        if n == 1:
            self.lone += 1
        elif n > 1:
            self.lone = 0

    def tick_over(self) -> None:
        self.watching = False
        self.seen = 0


def waits_for_the_thread(in_flight: int, fits_inline: bool) -> bool:
    """Does a chunk wait for the device thread's batch and then run inline (see the module's
    docstring), rather than be launched to the thread? ``in_flight``: batches launched to the
    thread and not done; ``fits_inline``: it would run inline on an idle device.

    >>> waits_for_the_thread(1, True)
    True
    >>> waits_for_the_thread(2, True)  # one running, one waiting: never behind both
    False
    >>> waits_for_the_thread(1, False)
    False
    """
    return fits_inline and in_flight == 1
