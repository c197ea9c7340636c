"""Concurrent single-row requests share one forward; a lone request is not held for rows that
won't come. (How fast: benchmarks/batching.py, not here.)"""

from __future__ import annotations

import asyncio

import torch
from torch import nn

from pool import ModelKey
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from tests.support.pool import config

KEY = ModelKey("counted", "1")


class CountedForwards(nn.Module):
    """A real linear model that records the rows of each forward pass."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(16, 4)
        self.rows: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows.append(int(x.shape[0]))
        return self.lin(x)


async def test_concurrent_rows_share_a_forward_and_a_lone_request_does_not_wait() -> None:
    w = DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=1 << 20))
    model = CountedForwards().eval()
    try:
        await w.add_model(KEY, config("counted", max_batch=16), lambda: model)
        model.rows.clear()  # warm-up passes
        xs = [torch.randn(1, 16) for _ in range(16)]
        results = await asyncio.gather(*[w.infer(KEY, {"x": x}) for x in xs])
        for x, r in zip(xs, results, strict=True):  # each caller gets its own row back
            torch.testing.assert_close(r.outputs["y"], model.lin(x).detach())
        assert sum(model.rows) == 16 and len(model.rows) < 16  # 16 callers, fewer forwards
        assert max(r.batch_size for r in results) > 1
        model.rows.clear()
        lone = await asyncio.wait_for(w.infer(KEY, {"x": xs[0]}), 30.0)  # no batch wait set
        assert lone.batch_size == 1 and model.rows == [1]
    finally:
        await w.close()
