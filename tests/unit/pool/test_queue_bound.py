"""The per-device queue bound (``max_queue``): exact at the bound, without walking every
model's queue on each submit (``QueueState.submit`` recounts only when its upper bound is hit)."""

import asyncio

import pytest
import torch

from policies.priority import Priority
from pool import ModelKey
from pool._private.queue import QueueState
from pool.config import ModelConfig

CFG = ModelConfig(name="m", inputs=[{"name": "x", "dtype": "FP32", "shape": [2]}],
                  outputs=[{"name": "y", "dtype": "FP32", "shape": [1]}])
A, B = ModelKey("a", "1"), ModelKey("b", "1")


@pytest.fixture
def queues():
    q = QueueState(max_queue=3, label="cpu")
    q.add(A, CFG)
    q.add(B, CFG)
    return q


def _submit(q: QueueState, key: ModelKey, loop: asyncio.AbstractEventLoop):
    return q.submit(q.models[key], {"x": torch.zeros(1, 2)}, Priority.INTERACTIVE, None, 0.0,
                    loop.create_future())


async def test_the_bound_counts_every_model_queue(queues):
    loop = asyncio.get_running_loop()
    _submit(queues, A, loop)
    _submit(queues, B, loop)
    _submit(queues, A, loop)
    with pytest.raises(asyncio.QueueFull, match="cpu: 3 requests queued"):
        _submit(queues, B, loop)


async def test_room_freed_by_answers_cancels_and_removals_is_found_at_the_bound(queues):
    loop = asyncio.get_running_loop()
    first = _submit(queues, A, loop)
    _submit(queues, A, loop)
    _submit(queues, B, loop)
    queues.models[A].queue.remove(first)  # answered (the worker drops it from the queue)
    _submit(queues, B, loop)  # the recount sees the room
    with pytest.raises(asyncio.QueueFull):
        _submit(queues, A, loop)
    queues.remove(B)  # two queued requests gone with their model
    _submit(queues, A, loop)
    _submit(queues, A, loop)
    with pytest.raises(asyncio.QueueFull):
        _submit(queues, A, loop)
