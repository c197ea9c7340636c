"""The stock arms of ``benchmarks.http_throughput``: the strongest stock Ray Serve deployment of
one small TorchScript model, and its exact handler under plain uvicorn in its own process (the
``stock_uvicorn`` arm: how much of a stock request is Serve's per-request wrapper)."""

from __future__ import annotations

import json

import numpy as np
import torch


def stock_app(path: str, threads: int, model: str):
    """What a capable user writes for one small TorchScript model: v2 JSON in and out, the
    forward pass in-process (no thread hop: for a sub-millisecond model it is the fastest)."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import Response

    @serve.deployment(name="Stock", max_ongoing_requests=512)
    class Stock:
        def __init__(self) -> None:
            torch.set_num_threads(threads)
            self.model = torch.jit.load(path, map_location="cpu").eval()

        def _forward(self, x: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                return self.model(torch.from_numpy(x)).numpy()

        async def __call__(self, request: Request) -> Response:
            body = json.loads(await request.body())
            inp = body["inputs"][0]
            x = np.asarray(inp["data"], dtype=np.float32).reshape(inp["shape"])
            y = self._forward(x)
            out = {"model_name": model, "outputs": [{"name": "logits", "datatype": "FP32",
                                                     "shape": list(y.shape),
                                                     "data": y.ravel().tolist()}]}
            return Response(json.dumps(out), media_type="application/json")

        async def infer(self, x: np.ndarray) -> np.ndarray:
            return self._forward(x)

    return Stock.bind()  # type: ignore[attr-defined]


def serve_stock(path: str, port: int, threads: int, model: str, ready) -> None:
    """Serve ``POST /stock`` (v2 JSON in and out, forward in-process) on ``port`` until killed."""
    import asyncio

    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    torch.set_num_threads(threads)
    net = torch.jit.load(path, map_location="cpu").eval()

    async def infer(request: Request) -> Response:  # the stock arm's __call__, line for line
        body = json.loads(await request.body())
        inp = body["inputs"][0]
        x = np.asarray(inp["data"], dtype=np.float32).reshape(inp["shape"])
        with torch.inference_mode():
            y = net(torch.from_numpy(x)).numpy()
        out = {"model_name": model, "outputs": [{"name": "logits", "datatype": "FP32",
                                                 "shape": list(y.shape),
                                                 "data": y.ravel().tolist()}]}
        return Response(json.dumps(out), media_type="application/json")

    server = uvicorn.Server(uvicorn.Config(
        Starlette(routes=[Route("/stock", infer, methods=["POST"])]), host="127.0.0.1",
        port=port, http="httptools", lifespan="off", access_log=False, log_level="error"))

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        ready.set()
        await task

    asyncio.run(main())
