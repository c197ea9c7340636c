"""The handle target's mapping between load requests, typed requests and outcomes.

The handle is a stand-in with the shape of a Serve ``DeploymentHandle`` (``infer.remote(req)``
returning an awaitable); the real app through its real handle is in ``docs/loadtest/handle/``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deploy.loadtest import LoadRequest, run_loadtest
from deploy.loadtest.config import LoadTestConfig
from deploy.loadtest.handle import HandleTarget
from router.errors import ModelNotFound
from router.schemas import InferenceRequest, InferenceResponse


class _Method:
    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def remote(self, req: InferenceRequest) -> Any:
        return self._fn(req)


class _Handle:
    def __init__(self) -> None:
        self.seen: list[InferenceRequest] = []
        self.infer = _Method(self._infer)

    async def _infer(self, req: InferenceRequest) -> InferenceResponse:
        self.seen.append(req)
        if req.model == "missing":
            raise ModelNotFound("no model 'missing'", field="model")
        return InferenceResponse(request_id=req.request_id, model=req.model,
                                 served_by="rules", degraded=True, reason="shed", cache="miss")


async def test_handle_target_builds_typed_requests_and_maps_answers() -> None:
    handle = _Handle()
    target = HandleTarget(handle)
    x = np.ones((1, 64), dtype=np.float32)
    req = LoadRequest("r1", "digits", {"pixels": ("FP32", x)}, priority="batch", caller="lt",
                      deadline_ms=250.0, version="2")
    out = await target.send(req)
    (ir,) = handle.seen
    assert (ir.model, ir.version, ir.priority.label, ir.caller, ir.deadline_ms,
            ir.request_id) == ("digits", "2", "batch", "lt", 250.0, "r1")
    assert np.array_equal(ir.inputs["pixels"], x)
    assert (out.ok, out.degraded, out.served_by, out.reason, out.cache) == (
        True, True, "rules", "shed", "miss")
    missing = await target.send(LoadRequest("r2", "missing", {"pixels": ("FP32", x)}))
    assert missing.error == "ModelNotFound"


async def test_handle_target_runs_under_the_open_loop_accounting() -> None:
    cfg = LoadTestConfig.model_validate({
        "target": {"app": "timeshare", "max_connections": 4},
        "models": [{"name": "digits", "weight": 3}, {"name": "missing", "weight": 1}],
        "inputs": [{"name": "pixels", "shape": [1, 64]}],
        "arrival": {"process": "constant", "rate": 100}, "duration_s": 0.5, "warmup_s": 0.1,
        "stability": {"window_s": 0.1, "windows": 3, "tolerance": 0.9},
    })
    result = await run_loadtest(cfg, HandleTarget(_Handle()), progress=False)
    run = result.runs[0]
    assert run["planned"] == 50
    assert run["errors"]["by_class"] == {"ModelNotFound": run["by_model"]["missing"]["requests"]}
    assert run["shares"]["degraded"] == 1.0
