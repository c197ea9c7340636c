"""Expected pool refusals cross the handle as values and come back as the same exceptions."""

import asyncio

import numpy as np
import pytest

from common.fallback_types import DeadlineTooShort, RequestExpired
from policies.priority import Priority
from pool.errors import DeviceOutOfMemory, ModelNotLoaded
from pool.host import ModelHost
from pool.service import PoolService
from pool.work import PoolRefusal, PoolReply, PoolWork, unwrap


class _Host(ModelHost):
    """A ModelHost whose ``run`` raises what it is given."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    async def run(self, work, **kw):
        if self.error is not None:
            raise self.error
        raise AssertionError("not reached")


class _Service(PoolService):
    def __init__(self, host: ModelHost) -> None:  # the real run_or_refusal over a given host
        self.pool, self.host = "gpu", host


async def run_work_or_refusal(host, work):
    return await _Service(host).run_or_refusal(work)


WORK = PoolWork("m", "1", {"x": np.zeros((1, 2), np.float32)}, Priority.BATCH,
                deadline_at=2.0, arrived_at=1.5)


@pytest.mark.parametrize("error, kind", [
    (RequestExpired("m@1: deadline cannot be met (not run)"), "expired"),
    (DeadlineTooShort("m@1: its deadline is shorter than its own work"), "too_short"),
    (DeviceOutOfMemory("m@1 needs 10 bytes"), "out_of_memory"),
    (ModelNotLoaded("model 'm' is not loaded here"), "not_loaded"),
    (asyncio.QueueFull("cpu: 5 requests queued"), "queue_full"),
])
async def test_expected_refusals_are_values_and_unwrap_to_the_same_exception(error, kind):
    reply = await run_work_or_refusal(_Host(error), WORK)
    assert reply == PoolRefusal(kind, str(error))
    with pytest.raises(type(error), match=str(error).split(":")[0]) as raised:
        unwrap(reply)
    assert type(raised.value) is type(error)  # (a subclass is not its base's kind)


async def test_other_errors_are_raised_not_refused():
    with pytest.raises(RuntimeError, match="boom"):
        await run_work_or_refusal(_Host(RuntimeError("boom")), WORK)


def test_unwrap_passes_a_reply_through():
    reply = PoolReply("m", "1", {"y": np.ones(1)}, 0.0, 0.1, 0.0, "cpu")
    assert unwrap(reply) is reply


def test_work_pickles_without_the_config_and_keeps_every_other_field():
    import pickle

    from pool.config import ModelConfig

    cfg = ModelConfig.model_validate({"name": "m", "inputs": [{"name": "x", "dtype": "FP32",
                                                             "shape": [2]}],
                                      "outputs": [{"name": "y", "dtype": "FP32", "shape": [1]}]})
    work = PoolWork("m", "1", {"x": np.ones((1, 2), np.float32)}, Priority.REALTIME,
                    deadline_at=2.0, arrived_at=1.5, caller="c", request_id="r", config=cfg)
    back = pickle.loads(pickle.dumps(work))
    assert back.config is None
    assert (back.model, back.version, back.priority, back.deadline_at, back.arrived_at,
            back.caller, back.request_id) == ("m", "1", Priority.REALTIME, 2.0, 1.5, "c", "r")
    assert np.array_equal(back.inputs["x"], work.inputs["x"])


def test_for_hop_keeps_every_field_but_the_deadline():
    import dataclasses

    from pool.config import ModelConfig

    cfg = ModelConfig(name="m", inputs=[{"name": "x", "dtype": "FP32", "shape": [2]}],
                      outputs=[{"name": "y", "dtype": "FP32", "shape": [1]}])
    work = PoolWork("m", "3", {"x": np.zeros((1, 2), np.float32)}, Priority.BATCH,
                    deadline_at=100.0, arrived_at=90.0, caller="c", request_id="r", config=cfg)
    hop = work.for_hop(95.0)
    assert hop.deadline_at == 95.0
    names = [f.name for f in dataclasses.fields(PoolWork)]
    assert names == ["model", "version", "inputs", "priority", "deadline_at", "arrived_at",
                     "caller", "request_id", "config"], "a new PoolWork field: carry it in for_hop"
    for name in names:
        if name != "deadline_at":
            assert getattr(hop, name) is getattr(work, name), name
