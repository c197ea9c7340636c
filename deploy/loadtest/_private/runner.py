"""Open-loop sending in this process (the tool) and a closed-loop client (the baseline).

Open loop (``run_open_loop``): each request is handed to the target at its planned time whether
or not earlier ones have answered, and its latency runs from the PLANNED send time (see
``engine.OpenLoop``). A server stall shows up in the latency of every request it delayed — no
coordinated omission. HTTP targets run in worker processes instead (``workers.run_http``); this
in-process path serves ``Target`` objects such as the Ray handle target.

Closed loop (``run_closed_loop``): each worker sends, waits for the answer, sends again, and times
each request from its actual send. During a stall it simply stops sending, so only one request
per worker sees the stall. It exists to show the difference, not for load tests.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deploy.loadtest._private.engine import OpenLoop, Records, RunProgress, TaskLane
from deploy.loadtest._private.plan import PlannedRequest
from deploy.loadtest.target import LoadRequest, Outcome, Target

__all__ = ["RunProgress", "Sample", "run_closed_loop", "run_open_loop", "samples_from"]

Clock = Callable[[], float]

# Lead time between building the lanes and the first planned send, so the first requests are
# not already late.
_START_LEAD_S = 0.02


@dataclass(frozen=True, slots=True)
class Sample:
    """One finished request. Times are seconds; ``planned_s`` is from the start of the run."""

    request_id: str
    planned_s: float
    lag_s: float        # when the generator acted - planned send (the tool's own lateness)
    latency_s: float    # answer - planned send (what a user arriving on plan would see)
    service_s: float    # answer - actual send
    model: str
    priority: str
    caller: str
    measured: bool
    outcome: Outcome
    wait_s: float = 0.0  # waited for a free connection (server backpressure; in latency_s)


def samples_from(plan: Sequence[PlannedRequest], rec: Records,
                 outcome: Callable[[Any], Outcome]) -> list[Sample]:
    """One ``Sample`` per planned request from an engine's records (``outcome`` turns a lane's
    raw result into an ``Outcome``)."""
    out = []
    for k, item in enumerate(plan):
        lag, sent, done = rec.lag[k], rec.sent[k], rec.done[k]
        result = rec.result[k]
        if result is None or math.isnan(done):  # cannot happen: the engine ends every request
            raise RuntimeError(f"request {item.request.request_id} has no result")
        out.append(_sample(item, lag=max(lag, 0.0), latency=done, service=done - sent,
                           outcome=outcome(result), wait=max(sent - lag, 0.0)))
    return out


async def run_open_loop(
    target: Target,
    plan: Sequence[PlannedRequest],
    *,
    max_in_flight: int = 10_000,
    lanes: int = 256,
    timeout_s: float = 30.0,
    clock: Clock = time.perf_counter,
    progress: RunProgress | None = None,
) -> list[Sample]:
    """Send ``plan`` on schedule through ``target`` and return one ``Sample`` per planned
    request, in plan order.

    At most ``min(lanes, max_in_flight)`` calls run at once; later ones queue (their wait is
    latency) up to ``max_in_flight`` outstanding, past which a send is not made and is recorded
    as error ``generator_overload``. A call not answered ``timeout_s`` after its planned time is
    cancelled and recorded as ``Timeout``.
    """
    n_lanes = max(1, min(lanes, max_in_flight))
    engine = OpenLoop([p.offset_s for p in plan], [p.request for p in plan],
                      lambda finish: TaskLane(target, finish), n_lanes, timeout_s=timeout_s,
                      max_in_flight=max_in_flight, clock=clock, progress=progress)
    rec = await engine.run(clock() + _START_LEAD_S)
    return samples_from(plan, rec, _as_outcome)


def _as_outcome(result: object) -> Outcome:
    assert isinstance(result, Outcome)
    return result


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
            outcome: Outcome, wait: float = 0.0) -> Sample:
    req = item.request
    return Sample(request_id=req.request_id, planned_s=item.offset_s, lag_s=lag,
                  latency_s=latency, service_s=service, model=req.model,
                  priority=req.priority, caller=req.caller, measured=item.measured,
                  outcome=outcome, wait_s=wait)
