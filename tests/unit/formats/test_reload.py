"""Hot reload and swapping in each format on the real ModelHost / DeviceWorker (no Ray)."""

from __future__ import annotations

import asyncio
import shutil
import time

import numpy as np
import pytest
import torch

from policies.priority import Priority
from pool._private.worker import DeviceWorker
from pool.device import DeviceSpec
from pool.host import ModelHost
from pool.repository import ModelRepository
from pool.work import PoolWork
from tests.support.formats import ALL_FORMATS, small_cnn

X = (np.random.default_rng(0).random((3, 64)) * 16).astype(np.float32)


def _work(model: str, version: str | None = None) -> PoolWork:
    now = time.time()
    return PoolWork(model=model, version=version, inputs={"pixels": X},
                    priority=Priority.INTERACTIVE, deadline_at=now + 30, arrived_at=now)


def _expected(seed: int) -> np.ndarray:
    with torch.inference_mode():
        return small_cnn(seed)(torch.from_numpy(X)).numpy()


@pytest.mark.parametrize("fmt", ALL_FORMATS)
async def test_new_version_goes_live_only_when_warm_while_traffic_runs(exported, fmt):
    v2 = exported / fmt / "2"
    staged = exported / fmt / ".v2"
    v2.rename(staged)  # version 2 arrives later
    host = ModelHost(ModelRepository(exported, settle_s=0),
                     DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=8 << 20)),
                     device_filter=lambda c: c.name == fmt)
    try:
        await host.sync()
        assert host.index()[fmt].default_version == "1"
        want = {"1": _expected(1), "2": _expected(2)}
        replies: list[tuple[str, bool, bool]] = []  # (version, v2 ready at answer, matches)
        stop = asyncio.Event()

        async def traffic():
            while not stop.is_set():
                reply = await host.run(_work(fmt))
                ready = host.index()[fmt].versions.get("2")
                ok = np.allclose(reply.outputs["logits"], want[reply.version], atol=1e-4)
                replies.append((reply.version, ready is not None and ready.state == "ready", ok))
                await asyncio.sleep(0)

        task = asyncio.create_task(traffic())
        await asyncio.sleep(0.05)
        staged.rename(v2)  # published atomically, as the publish API does
        await host.sync()  # loads + warms version 2 while traffic runs
        await asyncio.sleep(0.05)
        stop.set()
        await task
        assert all(ok for _, _, ok in replies), "an answer did not match its version's model"
        before = [v for v, ready, _ in replies if not ready]
        assert before and set(before) == {"1"}, "answered by v2 before it was warm"
        after = [v for v, ready, _ in replies if ready]
        assert after and after[-1] == "2"
        assert (await host.run(_work(fmt, "1"))).version == "1"  # both versions stay live
    finally:
        await host.worker.close()


async def test_export_and_onnx_models_swap_through_a_one_model_arena(exported):
    for fmt in ("torch_export", "onnx"):
        shutil.rmtree(exported / fmt / "2")
    # Room for one model on the "device": every alternation is a swap-in from the host tier.
    host = ModelHost(ModelRepository(exported, settle_s=0),
                     DeviceWorker(DeviceSpec(kind="cpu", memory_budget_bytes=100_000,
                                             inline_ms=0)),
                     device_filter=lambda c: c.format in ("torch_export", "onnx"))
    try:
        await host.sync()
        tiers = host.worker.tiers
        for _ in range(3):
            for fmt in ("torch_export", "onnx"):
                reply = await host.run(_work(fmt))
                np.testing.assert_allclose(reply.outputs["logits"], _expected(1), atol=1e-4)
                assert tiers.memory.is_resident(f"{fmt}@1")
        assert tiers.stats.swaps >= 6 and tiers.stats.swap_outs >= 5
        assert tiers.host.used_bytes >= 2 * 60_000  # both weight sets in the host tier
    finally:
        await host.worker.close()
