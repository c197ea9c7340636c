"""The loadtest's gRPC target (``target: {grpc: host:port}``) against a real ``grpc.aio`` server
running Timeshare's service (router.grpc_v2) over a small Frontend: the request's fields reach
the typed request, the labels come back, errors are status classes, and a run has its floor
measured against the null gRPC server."""

from __future__ import annotations

import socket
from typing import Any

import numpy as np
import pytest

from deploy.loadtest import LoadRequest, run_loadtest
from deploy.loadtest.config import LoadTestConfig
from deploy.loadtest.grpc_target import GrpcTarget
from router.errors import ModelNotFound
from router.frontend import Frontend
from router.grpc_v2 import GrpcSettings, InferenceService, start_grpc
from router.schemas import InferenceRequest, InferenceResponse


class _Front(Frontend):
    def __init__(self) -> None:
        self.seen: list[InferenceRequest] = []

    async def answer(self, request: InferenceRequest) -> InferenceResponse:
        self.seen.append(request)
        if request.model == "missing":
            raise ModelNotFound("model: no model 'missing'", field="model")
        return InferenceResponse(request_id=request.request_id, model=request.model,
                                 outputs={"logits": np.zeros((1, 10), np.float32)},
                                 served_by="rules:r", degraded=True, reason="shed", cache="miss")

    def live_models(self) -> dict[str, Any]:
        return {}


@pytest.fixture
async def address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    front = _Front()
    listener = await start_grpc(InferenceService(front, gate=None, default_deadline_ms=5000),
                                GrpcSettings(port=port), max_message_bytes=1 << 20)
    assert listener is not None
    yield f"127.0.0.1:{port}", front
    await listener.stop()


async def test_grpc_target_sends_the_request_and_maps_the_answer(address) -> None:
    addr, front = address
    target = GrpcTarget(addr)
    x = np.arange(64, dtype=np.float32).reshape(1, 64)
    out = await target.send(LoadRequest("r1", "digits", {"pixels": ("FP32", x)},
                                        priority="batch", caller="lt", deadline_ms=250.0,
                                        version="2"))
    (ir,) = front.seen
    assert (ir.model, ir.version, ir.priority.label, ir.caller, ir.deadline_ms,
            ir.request_id) == ("digits", "2", "batch", "lt", 250.0, "r1")
    assert np.array_equal(ir.inputs["pixels"], x)
    assert (out.ok, out.degraded, out.served_by, out.reason, out.cache, out.bytes_out) == (
        True, True, "rules:r", "shed", "miss", 40)
    missing = await target.send(LoadRequest("r2", "missing", {"pixels": ("FP32", x)}))
    assert missing.error == "grpc_NOT_FOUND"
    await target.aclose()


async def test_grpc_target_runs_under_the_open_loop_accounting_with_its_floor(address) -> None:
    addr, _ = address
    cfg = LoadTestConfig.model_validate({
        "target": {"grpc": addr, "max_connections": 4},
        "models": [{"name": "digits", "weight": 3}, {"name": "missing", "weight": 1}],
        "inputs": [{"name": "pixels", "shape": [1, 64]}],
        "arrival": {"process": "constant", "rate": 100}, "duration_s": 0.5, "warmup_s": 0.1,
        "stability": {"window_s": 0.1, "windows": 3, "tolerance": 0.9},
    })
    result = await run_loadtest(cfg, progress=False, floor=True)
    run = result.runs[0]
    assert run["planned"] == 50
    assert run["errors"]["by_class"] == {
        "grpc_NOT_FOUND": run["by_model"]["missing"]["requests"]}
    assert run["shares"]["degraded"] == 1.0
    assert result.floor is not None and result.floor["transport"] == "grpc"
    assert result.floor["errors"] == {}


@pytest.mark.parametrize("target, error", [
    ({"grpc": "http://127.0.0.1:8101"}, "host:port"),
    ({"grpc": "127.0.0.1:8101", "url": "http://127.0.0.1:8000"}, "exactly one"),
])
def test_grpc_target_config_is_checked(target, error) -> None:
    with pytest.raises(ValueError, match=error):
        LoadTestConfig.model_validate({
            "target": target, "models": [{"name": "m"}],
            "inputs": [{"name": "x", "shape": [1, 4]}], "arrival": {"rate": 10}})
