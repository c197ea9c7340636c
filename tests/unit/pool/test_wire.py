"""Expected pool refusals cross the handle as values and come back as the same exceptions."""

import asyncio

import numpy as np
import pytest

from pool.errors import DeviceOutOfMemory, ModelNotLoaded, RequestExpired
from pool.wire import PoolRefusal, PoolReply, run_work_or_refusal, unwrap, work_request
from policies.priority import Priority


class _Host:
    """Stands in for ModelHost.infer: raises what it is given."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    async def infer(self, model, version, inputs, *, priority, timeout_s):
        if self.error is not None:
            raise self.error
        raise AssertionError("not reached")


WORK = work_request("m", None, {"x": np.zeros((1, 2), np.float32)}, Priority.BATCH, 0.5)


@pytest.mark.parametrize("error, kind", [
    (RequestExpired("m@1: deadline cannot be met (not run)"), "expired"),
    (DeviceOutOfMemory("m@1 needs 10 bytes"), "out_of_memory"),
    (ModelNotLoaded("model 'm' is not loaded here"), "not_loaded"),
    (asyncio.QueueFull("cpu: 5 requests queued"), "queue_full"),
])
async def test_expected_refusals_are_values_and_unwrap_to_the_same_exception(error, kind):
    reply = await run_work_or_refusal(_Host(error), "gpu", WORK)
    assert reply == PoolRefusal(kind, str(error))
    with pytest.raises(type(error), match=str(error).split(":")[0]):
        unwrap(reply)


async def test_other_errors_are_raised_not_refused():
    with pytest.raises(RuntimeError, match="boom"):
        await run_work_or_refusal(_Host(RuntimeError("boom")), "gpu", WORK)


def test_unwrap_passes_a_reply_through():
    reply = PoolReply("gpu", "m", "1", {"y": np.ones(1)}, 0.0, 0.1, 0.0, "cpu")
    assert unwrap(reply) is reply
