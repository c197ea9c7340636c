"""Open-loop sending (the tool) and a closed-loop client (the baseline it is compared with).

Open loop: each request is sent at its planned time whether or not earlier ones have answered,
and its latency runs from the PLANNED send time. If the server stalls, requests planned during
the stall still go out (or, if the generator itself is late, are charged for its lateness), so
the stall shows up in the latency of every request it delayed — no coordinated omission.

Closed loop (``run_closed_loop``): each worker sends, waits for the answer, sends again, and times
each request from its actual send. During a stall it simply stops sending, so only one request
per worker sees the stall. It exists to show the difference, not for load tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from deploy.loadtest._private.plan import PlannedRequest
from deploy.loadtest.target import LoadRequest, Outcome, Target

__all__ = ["RunProgress", "Sample", "run_closed_loop", "run_open_loop"]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

# Lead time between building the task set and the first planned send, so the first requests
# are not already late.
_START_LEAD_S = 0.02


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished request. Times are seconds; ``planned_s`` is from the start of the run."""

    request_id: str
    planned_s: float
    lag_s: float        # actual send - planned send (how late the generator was)
    latency_s: float    # answer - planned send (what a user arriving on plan would see)
    service_s: float    # answer - actual send
    model: str
    priority: str
    caller: str
    measured: bool
    outcome: Outcome


@dataclass(slots=True)
class RunProgress:
    """Live counters of one run, read by the progress bar."""

    total: int
    sent: int = 0
    done: int = 0
    errors: int = 0
    in_flight: int = 0
    last_lag_s: float = 0.0
    started_at: float = 0.0


async def run_open_loop(
    target: Target,
    plan: Sequence[PlannedRequest],
    *,
    max_in_flight: int = 10_000,
    clock: Clock = time.perf_counter,
    sleep: Sleep = asyncio.sleep,
    progress: RunProgress | None = None,
) -> list[Sample]:
    """Send ``plan`` on schedule and return one ``Sample`` per planned request, in plan order.

    ``max_in_flight`` bounds outstanding requests (memory); a send that would exceed it is not
    made and is recorded with error ``generator_overload`` and zero latency.
    """
    prog = progress or RunProgress(total=len(plan))
    results: list[Sample | None] = [None] * len(plan)
    tasks: set[asyncio.Task[None]] = set()
    t0 = clock() + _START_LEAD_S
    prog.started_at = t0

    async def one(i: int, item: PlannedRequest, due: float) -> None:
        sent = clock()
        prog.last_lag_s = sent - due
        outcome = await target.send(item.request)
        done = clock()
        prog.done += 1
        prog.in_flight -= 1
        prog.errors += outcome.error is not None
        results[i] = _sample(item, lag=sent - due, latency=done - due, service=done - sent,
                             outcome=outcome)

    for i, item in enumerate(plan):
        due = t0 + item.offset_s
        delay = due - clock()
        if delay > 0:
            await sleep(delay)
        else:
            await asyncio.sleep(0)  # behind schedule: still let in-flight requests progress
        prog.sent += 1
        if len(tasks) >= max_in_flight:
            prog.done += 1
            prog.errors += 1
            results[i] = _sample(item, lag=clock() - due, latency=0.0, service=0.0,
                                 outcome=Outcome(error="generator_overload"))
            continue
        prog.in_flight += 1
        task = asyncio.create_task(one(i, item, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    return [s for s in results if s is not None]


async def run_closed_loop(
    target: Target,
    requests: Sequence[LoadRequest],
    *,
    concurrency: int,
    duration_s: float,
    clock: Clock = time.perf_counter,
) -> list[Sample]:
    """Baseline with coordinated omission: ``concurrency`` workers send back to back for
    ``duration_s``, cycling through ``requests``, each latency timed from the actual send."""
    if concurrency < 1 or not requests:
        raise ValueError(f"concurrency must be >= 1 and requests non-empty, got "
                         f"concurrency={concurrency} requests={len(requests)}")
    t0 = clock()
    samples: list[Sample] = []
    counter = 0

    async def worker() -> None:
        nonlocal counter
        while clock() - t0 < duration_s:
            req = requests[counter % len(requests)]
            counter += 1
            sent = clock()
            outcome = await target.send(req)
            done = clock()
            item = PlannedRequest(sent - t0, req, measured=True)
            samples.append(_sample(item, lag=0.0, latency=done - sent, service=done - sent,
                                   outcome=outcome))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    samples.sort(key=lambda s: s.planned_s)
    return samples


def _sample(item: PlannedRequest, *, lag: float, latency: float, service: float,
            outcome: Outcome) -> Sample:
    req = item.request
    return Sample(request_id=req.request_id, planned_s=item.offset_s, lag_s=lag,
                  latency_s=latency, service_s=service, model=req.model,
                  priority=req.priority, caller=req.caller, measured=item.measured,
                  outcome=outcome)
