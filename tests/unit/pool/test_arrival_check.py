"""The worker's check on an arrival at a full device: constant time, not a triage.

An arrival while the device is full used to triage the whole queue (build every request's
view, sort them): about a tenth of a cache-bypassed request's CPU on the served ingress at
c=16, and past saturation, where the queue is longest, the loop's whole time (an H100 at 1.7x
a 300-model zoo's capacity answered 4 % in time). Now the policy judges it against the last
triage's live work and the rank of its last live request
(``SchedulingPolicy.admit_arrival``): kept when it fits behind all of it, refused when it
ranks last and misses, and only an arrival that would rank among the live work gets a triage,
one per turn of the loop however many arrive.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from policies.device_queue import ModelView, RequestView, SchedulerSnapshot
from policies.priority import Priority
from policies.scheduling import FifoSchedulingPolicy, PrioritySchedulingPolicy
from pool._private.worker import DeviceWorker
from pool.config import ModelConfig
from pool.device import DeviceSpec
from tests.support.clocks import FakeClock
from tests.support.pool import SOMETIMES_SLOW as KEY
from tests.support.pool import SometimesSlow

NOW = 100.0


def _random_snapshot(rng: random.Random) -> SchedulerSnapshot:
    models, rid = [], 0
    for k in range(rng.randint(1, 4)):
        reqs = []
        for _ in range(rng.randint(0 if k else 1, 6)):
            deadline = None if rng.random() < 0.2 else NOW + rng.uniform(-0.001, 0.05)
            reqs.append(RequestView(rid, Priority(rng.randint(0, 3)), deadline,
                                    NOW - rng.uniform(0, 5), rng.randint(1, 8)))
            rid += 1
        resident = rng.random() < 0.7
        models.append(ModelView(f"m{k}", resident, tuple(reqs), 32,
                                row_cost_s=rng.uniform(0.0, 0.004),
                                swap_cost_s=0.0 if resident else rng.uniform(0.0, 0.02)))
    return SchedulerSnapshot(NOW, tuple(models), pace=rng.uniform(1.0, 3.0))


def _with(snap: SchedulerSnapshot, m: ModelView, r: RequestView) -> SchedulerSnapshot:
    models = tuple(ModelView(x.key, x.resident, (*x.requests, r), x.max_batch_size,
                             row_cost_s=x.row_cost_s, swap_cost_s=x.swap_cost_s)
                   if x is m else x for x in snap.models)
    return SchedulerSnapshot(snap.now, models, pace=snap.pace)


@pytest.mark.parametrize("policy", [PrioritySchedulingPolicy(), FifoSchedulingPolicy()],
                         ids=lambda p: p.name)
def test_the_arrival_check_agrees_with_the_triage_it_replaces(policy):
    """Kept: the triage with the arrival keeps it. Refused: the triage refuses it. Unsure:
    only where it ranks among the live requests."""
    rng = random.Random(7)
    verdicts = {True: 0, False: 0, None: 0}
    for _ in range(1500):
        snap = _random_snapshot(rng)
        t = policy.triaged(snap)
        m = rng.choice(snap.models)
        deadline = None if rng.random() < 0.1 else NOW + rng.uniform(0.0, 0.08)
        r = RequestView(10_000, Priority(rng.randint(0, 3)), deadline, NOW, rng.randint(1, 8))
        rank = policy.rank(r, NOW)
        verdict = policy.admit_arrival(
            now=NOW, deadline=deadline, rank=rank, work_s=r.rows * m.row_cost_s,
            swap_s=0.0 if m.resident else m.swap_cost_s, swap_paid=m.key in t.live,
            live_s=t.live_s, tail=t.tail, pace=snap.pace)
        verdicts[verdict] += 1
        expired, _ = policy.triage(_with(snap, m, r))
        if verdict is True:
            assert r.id not in expired, (snap, r)
        elif verdict is False:
            assert r.id in expired, (snap, r)
            assert t.tail is None or rank >= t.tail
        else:
            assert t.tail is not None and rank < t.tail
    if policy.name == "fifo":  # an arrival is the latest: it always ranks last
        assert verdicts[None] == 0 and min(verdicts[True], verdicts[False]) > 100, verdicts
    else:
        assert min(verdicts.values()) > 100, verdicts  # every branch was exercised


def test_the_check_is_the_deadline_against_the_paced_live_work():
    p = PrioritySchedulingPolicy()
    last = (Priority.INTERACTIVE, 2.0, 1.0, 9)
    kw = {"now": 1.0, "work_s": 0.05, "swap_s": 0.05, "pace": 2.0}
    early, late = (Priority.INTERACTIVE, 1.2, 1.0, 10), (Priority.INTERACTIVE, 3.0, 1.0, 10)
    assert p.admit_arrival(deadline=None, rank=late, swap_paid=False, live_s=1e9, tail=last,
                           **kw)
    # (0.15 + 0.05 + 0.05) * 2 = 0.5: fits by 1.6
    assert p.admit_arrival(deadline=1.6, rank=late, swap_paid=False, live_s=0.15, tail=last,
                           **kw) is True
    # ranks last; misses by 1.5 with the swap, fits without it once paid
    assert p.admit_arrival(deadline=1.5, rank=late, swap_paid=False, live_s=0.15, tail=last,
                           **kw) is False
    assert p.admit_arrival(deadline=1.5, rank=late, swap_paid=True, live_s=0.15, tail=last,
                           **kw) is True
    # ranks among the live work: the triage decides
    assert p.admit_arrival(deadline=1.5, rank=early, swap_paid=False, live_s=0.15, tail=last,
                           **kw) is None
    # nothing live: it ranks last
    assert p.admit_arrival(deadline=1.1, rank=early, swap_paid=False, live_s=0.0, tail=None,
                           **kw) is False


@pytest.mark.parametrize("policy", [PrioritySchedulingPolicy(), FifoSchedulingPolicy()],
                         ids=lambda p: p.name)
def test_a_refusal_blames_the_deadline_only_where_the_request_would_miss_alone(policy):
    """Of the requests a triage refuses, ``too_short`` holds exactly those whose own work (rows,
    and their model's swap-in if not resident) misses their deadline from their arrival with
    nothing ahead: those are the caller's 504; the others were refused for the load (503)."""
    rng = random.Random(11)
    seen = {True: 0, False: 0}
    for _ in range(1500):
        snap = _random_snapshot(rng)
        t = policy.triaged(snap)
        assert set(t.too_short) <= set(t.expired)
        for m in snap.models:
            for r in m.requests:
                if r.id not in t.expired:
                    continue
                own = r.rows * m.row_cost_s + (0.0 if m.resident else m.swap_cost_s)
                alone = r.deadline is not None and r.arrival + own * snap.pace >= r.deadline
                assert (r.id in t.too_short) == alone, (snap, r)
                seen[alone] += 1
        d = policy.decide(snap)
        assert set(d.too_short) == set(t.too_short) & set(d.expired)
    assert min(seen.values()) >= 10  # both kinds of refusal were drawn


class CountingPolicy(PrioritySchedulingPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.triages = 0

    def triaged(self, snap):
        self.triages += 1
        return super().triaged(snap)


async def test_arrivals_that_fit_during_a_chunk_skip_the_triage_and_those_that_may_not_get_it():
    clock, policy = FakeClock(), CountingPolicy()
    worker = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20), clock=clock,
                          scheduler=policy)
    model = SometimesSlow().eval()
    cfg = ModelConfig(name=KEY.name, inputs=[{"name": "x", "dtype": "FP32", "shape": [4]}],
                      outputs=[{"name": "y", "dtype": "FP32", "shape": [2]}], batch_wait_ms=0)
    await worker.add_model(KEY, cfg, lambda: model)
    try:
        x = {"x": torch.ones(1, 4)}
        await worker.infer(KEY, x, deadline=clock() + 10.0)  # measured at normal speed
        model.hang.set()
        running = asyncio.create_task(worker.infer(KEY, x, deadline=clock() + 10.0))
        while not worker._running:
            await asyncio.sleep(0.001)
        before = policy.triages
        fits = [asyncio.create_task(worker.infer(KEY, x, deadline=clock() + 10.0))
                for _ in range(5)]
        await asyncio.sleep(0)
        assert policy.triages == before  # five arrivals, no triage while the chunk runs
        with pytest.raises(Exception) as refused:
            await worker.infer(KEY, x, deadline=clock() + 1e-9)
        # shorter than its own work: the deadline refused it, not the queue
        assert type(refused.value).__name__ == "DeadlineTooShort"
        assert policy.triages == before + 1 and not running.done()
        # time for its own work, not behind the five kept and the chunk running (a less urgent
        # class, so it ranks last: refused on arrival, no triage): the queue refused it
        own = worker.queues.models[KEY].ewma_row_s * worker.pace.factor
        with pytest.raises(Exception) as refused:
            await worker.infer(KEY, x, priority=Priority.BACKGROUND, deadline=clock() + 2 * own)
        assert type(refused.value).__name__ == "RequestExpired"
        assert policy.triages == before + 1
        assert not running.done()
        model.hang.clear()
        outs = await asyncio.gather(running, *fits)
        assert all(o.outputs["y"].shape == (1, 2) for o in outs)
    finally:
        await worker.close()
