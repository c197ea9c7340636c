"""router.loop_load.LoopLoad on a real event loop: idle, saturated, and stopping when idle."""

from __future__ import annotations

import asyncio
import time

import pytest

from router.loop_load import LoopLoad


async def _hog(until: float, block_s: float) -> None:
    """Keep the loop thread busy: each pass spins for ``block_s`` (CPU, not a sleep)."""
    while time.perf_counter() < until:
        end = time.perf_counter() + block_s
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0)


HANG_S = 30.0  # only a hang waits this long


async def _until(condition, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_S
    while not condition():
        assert loop.time() < deadline, f"never: {what}"
        await asyncio.sleep(0.005)


async def test_an_idle_loop_reads_less_busy_than_a_saturated_one() -> None:
    # The share a shared host gives this thread is not ours to bound: the saturated loop's
    # reading is compared with the idle one's, not with a fixed figure.
    load = LoopLoad(interval_s=0.005)
    load.touch()
    await asyncio.sleep(0.15)
    idle = load.busy
    assert load.running and 0.0 <= idle <= 1.0
    load.touch()
    await _hog(time.perf_counter() + 0.4, block_s=0.002)
    busy = load.busy
    assert 0.0 < busy <= 1.0 and busy > idle, (idle, busy)
    await load.close()
    assert not load.running


async def test_it_stops_after_idle_s_without_a_touch_and_restarts_on_the_next() -> None:
    load = LoopLoad(interval_s=0.005, idle_s=0.05)
    load.touch()
    await _hog(time.perf_counter() + 0.03, block_s=0.002)
    await _until(lambda: not load.running, "stopped after idle_s without a touch")
    assert load.busy == 0.0  # ended by itself, no stale verdict left
    load.touch()
    assert load.running
    await load.close()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        LoopLoad(interval_s=0)
