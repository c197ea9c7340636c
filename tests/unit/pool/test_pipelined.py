"""Pipelined swap-in on the CPU stand-in: groups, per-group waits, and outputs equal to a fresh
model's (the copy thread really races the forward pass)."""

import asyncio
import itertools

import pytest
import torch
from torch import nn

from policies.priority import Priority
from pool._private.pipelined import plan_groups
from pool._private.residency import Residency
from pool._private.weights import pack
from pool.device import DeviceSpec

WIDTH, LAYERS = 512, 32
LAYER_BYTES = WIDTH * WIDTH * 4


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(*[m for _ in range(LAYERS)
                           for m in (nn.Linear(WIDTH, WIDTH, bias=False), nn.ReLU())]).eval()


def test_groups_cover_the_buffer_small_first_then_growing():
    packed = pack(_net(0))
    groups = plan_groups(packed, first_bytes=LAYER_BYTES, growth=2.0)
    assert groups[0].start == 0 and groups[-1].end == packed.nbytes
    assert all(a.end == b.start for a, b in itertools.pairwise(groups))
    assert [g.last_slot - g.first_slot for g in groups] == [1, 2, 4, 8, 16, 1]
    assert groups[0].nbytes == LAYER_BYTES
    with pytest.raises(ValueError, match="first_bytes"):
        plan_groups(packed, first_bytes=0)


async def test_pipelined_swap_in_computes_what_a_fresh_model_computes():
    tiers = Residency(DeviceSpec(kind="cpu", memory_budget_bytes=LAYER_BYTES * LAYERS + 4096))
    for key, seed in (("a", 0), ("b", 1)):
        packed, load_s = await tiers.load(lambda s=seed: _net(s))
        tiers.register(key, lambda s=seed: _net(s), Priority.INTERACTIVE, packed, load_s)
    # One row: each layer computes far faster than its 1 MB copy, so without the per-group
    # waits the forward pass overtakes the copy thread and reads the other model's weights.
    x = torch.randn(1, WIDTH)
    for key, seed in (("a", 0), ("b", 1), ("a", 0)):  # each swap-in evicts the other model
        swap = tiers.reserve(key, Priority.INTERACTIVE, {})
        assert swap is not None
        pc = tiers.copy_pipelined(swap, first_bytes=LAYER_BYTES, growth=1.0)
        assert pc is not None and len(pc.groups) == LAYERS
        module = tiers.module(key)
        with torch.inference_mode(), pc.hooks(module):
            y = module(x)
        tiers.swapped(swap, pc.synchronize())
        assert torch.equal(y, _net(seed)(x))
        assert 0 < pc.ready_s(0) <= pc.ready_s(len(pc.groups) - 1)
    assert tiers.stats.swaps == 3 and tiers.memory.resident_keys() == ["a"]
    await asyncio.sleep(0)
