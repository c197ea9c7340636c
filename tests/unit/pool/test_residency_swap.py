"""Swap-ins split in two: reserve on the loop, copy in the device thread (with the forward)."""

import asyncio

import pytest
import torch
from torch import nn

from policies.priority import Priority
from pool import ModelKey
from pool._private.residency import Residency
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from tests.support.pool import MODEL_BYTES, config

I = Priority.INTERACTIVE


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4)).eval()


class Flaky(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.net = _mlp(seed)
        self.fail = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fail:
            raise RuntimeError("model failed")
        return self.net(x)


async def test_a_failed_chunk_during_swap_in_releases_the_region_and_serves_after():
    w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=6 * 1024, inline_ms=0))
    try:
        a, b = Flaky(0), Flaky(1)
        await w.add_model(ModelKey("a", "1"), config("a"), lambda: a)
        await w.add_model(ModelKey("b", "1"), config("b"), lambda: b)
        assert w.status()["resident"] == ["a@1"]  # one fits
        b.fail = True
        with pytest.raises(RuntimeError, match="model failed"):
            await w.infer(ModelKey("b", "1"), {"x": torch.randn(1, 16)})
        st = w.status()
        assert "b@1" not in st["resident"] and st["swaps"]["count"] == 1  # a's load only
        assert st["memory"]["used_bytes"] <= st["memory"]["total_bytes"]
        b.fail = False
        x = torch.randn(3, 16)
        r = await w.infer(ModelKey("b", "1"), {"x": x})
        assert torch.allclose(r.outputs["y"], _mlp(1)(x), atol=1e-6)
    finally:
        await w.close()


async def test_a_pending_copy_keeps_its_host_buffer_when_the_host_tier_overflows():
    tiers = Residency(DeviceSpec(kind="cpu", memory_budget_bytes=6 * 1024,
                                 host_budget_bytes=MODEL_BYTES + 1024))
    for key, seed in (("a", 0), ("b", 1)):
        packed, load_s = await tiers.load(lambda s=seed: _mlp(s))
        tiers.register(key, lambda s=seed: _mlp(s), I, packed, load_s)
    assert tiers.host_keys() == ["b"]  # budget holds one: a went back to disk
    swap = tiers.reserve("b", I, {})
    assert swap is not None
    packed, load_s = await tiers.load(lambda: _mlp(2))
    tiers.register("c", lambda: _mlp(2), I, packed, load_s)  # would drop b's buffer...
    assert "b" in tiers.host_keys()  # ...but b is pinned with its copy pending
    tiers.swapped(swap, await asyncio.to_thread(tiers.copy, swap))
    x = torch.randn(2, 16)
    assert torch.allclose(tiers.module("b")(x), _mlp(1)(x), atol=1e-6)
    assert tiers.stats.swaps == 1
