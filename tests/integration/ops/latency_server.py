"""A KServe-v2-shaped HTTP server with a known, injected latency, for load-generator tests.

Run as ``python -m tests.integration.ops.latency_server --port P [--base-ms B --exp-mean-ms M]``.
It runs in its own process so the load generator under test does not share a GIL with it.

Each infer request sleeps ``base_ms + Exp(exp_mean_ms)`` (seeded) and records, by request id,
how long it actually held the request (the injected delay, plus any oversleep); ``drawn_ms``
lists the drawn delays themselves. Model names select behaviour: ``broken`` answers 503;
``degraded`` answers a labelled degraded result (served_by ``rules``, reason ``shed``, cache
``bypass``); anything else a normal result (served_by ``gpu:<model>@1``, cache ``miss``).

Control endpoints: ``POST /control/stall`` {"seconds": S} holds every request that arrives in the
next S seconds until the stall ends; ``POST /control/reset`` clears the recorded delays;
``GET /control/delays`` returns them (ms, by request id); ``GET /health``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


class _State:
    def __init__(self, base_ms: float, exp_mean_ms: float, seed: int) -> None:
        self.base_ms = base_ms
        self.exp_mean_ms = exp_mean_ms
        self.rng = random.Random(seed)
        self.delays_ms: dict[str, float] = {}
        self.drawn_ms: list[float] = []
        self.stall_until = 0.0

    def draw_ms(self) -> float:
        extra = self.rng.expovariate(1.0 / self.exp_mean_ms) if self.exp_mean_ms > 0 else 0.0
        return self.base_ms + extra


def build_app(state: _State) -> Starlette:
    async def infer(request: Request) -> JSONResponse:
        name = request.path_params["name"]
        body = await request.json()
        arrived = time.monotonic()
        if arrived < state.stall_until:
            await asyncio.sleep(state.stall_until - arrived)
        drawn = state.draw_ms()
        await asyncio.sleep(drawn / 1000.0)
        # What the request was actually held (the sleep overshoots on a busy machine).
        state.delays_ms[str(body.get("id"))] = (time.monotonic() - arrived) * 1000.0
        state.drawn_ms.append(drawn)
        if name == "broken":
            return JSONResponse({"error": "no replica"}, status_code=503)
        params = ({"degraded": True, "served_by": "rules", "reason": "shed", "cache": "bypass"}
                  if name == "degraded" else
                  {"degraded": False, "served_by": f"gpu:{name}@1", "reason": None,
                   "cache": "miss"})
        return JSONResponse({
            "model_name": name, "id": body.get("id"),
            "outputs": [{"name": "label", "shape": [1], "datatype": "INT64", "data": [3]}],
            "parameters": params,
        })

    async def stall(request: Request) -> JSONResponse:
        seconds = float((await request.json())["seconds"])
        state.stall_until = time.monotonic() + seconds
        return JSONResponse({"stall_until": state.stall_until})

    async def reset(request: Request) -> JSONResponse:
        state.delays_ms.clear()
        state.drawn_ms.clear()
        return JSONResponse({"ok": True})

    async def delays(request: Request) -> JSONResponse:
        return JSONResponse({"delays_ms": state.delays_ms, "drawn_ms": state.drawn_ms})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return Starlette(routes=[
        Route("/v2/models/{name}/infer", infer, methods=["POST"]),
        Route("/control/stall", stall, methods=["POST"]),
        Route("/control/reset", reset, methods=["POST"]),
        Route("/control/delays", delays, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
    ])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--base-ms", type=float, default=10.0)
    p.add_argument("--exp-mean-ms", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    app = build_app(_State(a.base_ms, a.exp_mean_ms, a.seed))
    uvicorn.run(app, host="127.0.0.1", port=a.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
