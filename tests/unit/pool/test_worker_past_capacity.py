"""Past capacity the worker's loop stays ahead of its arrivals.

On an H100 at 1.7x a 300-model zoo's capacity the worker answered 4 % in time: every arrival at
the full device ran a triage of the whole queue, and every launch another, each costing in
proportion to a queue that is longest exactly then. Now an arrival at a full device is judged
in constant time (``SchedulingPolicy.admit_arrival``), what still needs a triage gets one per
turn of the loop, and on a device that runs several batches at once the completions of one
turn are decided on together, their slots filled from one triage (``SchedulingPolicy.plan``).

A ``HeldExecutor`` (``test_worker_in_flight``) keeps launched batches until the test completes
them; here it runs several at once, as the CUDA executor does.
"""

import asyncio

import pytest
import torch

from common.fallback_types import RequestExpired
from policies.priority import Priority
from policies.scheduling import device_scheduling_policy
from pool._private.slots import StreamSlots
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from tests.support.clocks import FakeClock
from tests.unit.pool.test_worker_in_flight import HeldExecutor, build, config, key, settle

I, G = Priority.INTERACTIVE, Priority.BACKGROUND
X = {"x": torch.randn(1, 16)}


class ConcurrentHeld(HeldExecutor):
    concurrent = True

    def rooms(self):
        return tuple(max(0, self.per_class - sum(1 for b in self.held if b.priority == p))
                     for p in Priority)

    def launch_limit(self):
        return sum(self.rooms())


class Counting:
    """The device's priority policy, counting its triages."""

    def __init__(self) -> None:
        self.policy = device_scheduling_policy("priority", stream_priorities=True)
        self.triages = 0
        real = self.policy.triaged

        def triaged(snap):
            self.triages += 1
            return real(snap)

        self.policy.triaged = triaged  # type: ignore[method-assign]


@pytest.fixture
async def worker():
    made = []

    async def _make(n_models, per_class=2):
        ex, counting, clock = [], Counting(), FakeClock()

        def factory(device, tiers, on_done):
            ex.append(ConcurrentHeld(device, tiers, on_done, per_class=per_class))
            return ex[0]

        w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=n_models * 6 * 1024,
                                    inline_ms=0), executor=factory, clock=clock,
                         scheduler=counting.policy)
        made.append(w)
        for i in range(n_models):
            await w.add_model(key(i), config(f"m{i}"), lambda i=i: build(i))
        return w, ex[0], counting, clock

    yield _make
    for w in made:
        await w.close()


async def test_arrivals_at_a_full_device_are_judged_without_a_triage(worker):
    w, ex, counting, clock = await worker(8)
    running = [asyncio.ensure_future(w.infer(key(i), X)) for i in range(2)]
    await settle()
    assert len(ex.held) == 2  # the interactive stream is full
    row_s = w.queues.models[key(2)].ewma_row_s  # (the initial estimate: 0.5 ms a row)
    before = counting.triages
    budget = clock() + 3.5 * row_s  # room for three of them behind one another
    queued = [asyncio.ensure_future(w.infer(key(2 + i % 6), X, deadline=budget))
              for i in range(10)]
    await settle()
    refused = [f for f in queued if f.done()]
    assert len(refused) == 7 and all(isinstance(f.exception(), RequestExpired) for f in refused)
    assert counting.triages == before  # ten arrivals, kept or refused, and no triage
    assert w.expired == 7

    # Arrivals that would rank among the queued work (earlier deadlines) need a triage: one
    # for all of this turn's, not one each.
    urgent = [asyncio.ensure_future(w.infer(key(2), X, deadline=clock() + 1e-6))
              for _ in range(5)]
    await settle()
    assert counting.triages == before + 1
    assert all(isinstance(f.exception(), RequestExpired) for f in urgent)

    for b in list(ex.held):
        ex.finish(b)
    await settle()
    while ex.held:
        for b in list(ex.held):
            ex.finish(b)
        await settle()
    await asyncio.gather(*running, *(f for f in queued if f not in refused))


async def test_completions_of_one_turn_fill_their_slots_from_one_triage(worker):
    w, ex, counting, _ = await worker(8, per_class=3)
    first = [asyncio.ensure_future(w.infer(key(i), X)) for i in range(3)]
    await settle()
    waiting = [asyncio.ensure_future(w.infer(key(3 + i), X)) for i in range(3)]
    await settle()
    assert sorted(b.name for b in ex.held) == ["m0@1", "m1@1", "m2@1"]
    before = counting.triages
    for b in list(ex.held):  # three completions come back in one turn of the loop
        ex.finish(b)
    await settle()
    assert counting.triages == before + 1  # one round for the three
    assert sorted(b.name for b in ex.held) == ["m3@1", "m4@1", "m5@1"]
    await asyncio.gather(*first)
    for b in list(ex.held):
        ex.finish(b)
    outs = await asyncio.gather(*waiting)
    for i, o in enumerate(outs):
        with torch.inference_mode():
            torch.testing.assert_close(o.outputs["y"], build(3 + i)(X["x"]))


def test_stream_slots_hold_two_and_more_while_their_work_stays_short():
    s = StreamSlots(2, horizon_s=0.002, most=4)
    assert s.rooms() == (4, 4, 4, 4)
    s.add(I, 0.010)
    s.add(I, 0.010)
    assert not s.has_room(I) and s.rooms()[I] == 0  # two long batches: full
    assert s.has_room(G)
    s.remove(I, 0.010)
    assert s.has_room(I)  # back under the minimum depth
    s.remove(I, 0.010)
    for _ in range(4):
        assert s.has_room(I)
        s.add(I, 0.0001)  # small batches pile up to ``most``
    assert not s.has_room(I) and s.rooms()[I] == 0
    for _ in range(4):
        s.remove(I, 0.0001)
    assert s.work_s[I] == 0.0 and s.count[I] == 0  # (no drift left behind when empty)
    with pytest.raises(ValueError, match="per_stream"):
        StreamSlots(0)
    with pytest.raises(ValueError, match="horizon_s"):
        StreamSlots(2, horizon_s=-1.0)
