"""A lean gRPC load client and a null gRPC server for ``ModelInfer``, each run in its own process.

The gRPC twin of ``benchmarks._http_client``: one ``grpc.aio`` channel (HTTP/2 multiplexes the
calls), a request serialized once and sent as bytes, ``concurrency`` callers in a closed loop.
Every answer is parsed (as a real client would) and only model answers count: one whose
``degraded`` parameter is true goes to ``n_degraded``. ``null_grpc_server`` answers every call
with a fixed ``ModelInferResponse`` without parsing the request, so a run against it measures
the client's own cost.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from deploy.loadtest._private.grpc_null import serve_null_grpc
from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb

__all__ = ["METHOD", "null_grpc_server", "run_grpc_load"]

METHOD = "/inference.GRPCInferenceService/ModelInfer"


def _identity(b: bytes) -> bytes:
    return b


async def _closed(port: int, body: bytes, concurrency: int, duration_s: float,
                  warmup_s: float) -> dict:
    lat: list[float] = []
    errors: list[str] = []
    degraded = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD, request_serializer=_identity,
                                   response_deserializer=pb.ModelInferResponse.FromString)
        start = time.perf_counter()
        measure_from, stop = start + warmup_s, start + warmup_s + duration_s

        async def worker() -> None:
            nonlocal degraded
            while (t0 := time.perf_counter()) < stop:
                try:
                    resp = await call(body, timeout=30)
                except grpc.aio.AioRpcError as e:
                    if t0 >= measure_from:
                        errors.append(f"{e.code().name}: {e.details()}")
                    continue
                done = time.perf_counter()
                if t0 < measure_from:
                    continue
                if resp.parameters["degraded"].bool_param:
                    degraded += 1
                else:
                    lat.append(done - t0)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"latencies_s": lat, "errors": errors[:5], "n_errors": len(errors),
            "n_degraded": degraded, "duration_s": duration_s}


def run_grpc_load(port: int, body: bytes, *, duration_s: float, concurrency: int = 1,
                  warmup_s: float = 0.5) -> dict:
    """A closed-loop run (``latencies_s``, ``n_errors``, ``n_degraded``, ``duration_s``)."""
    return asyncio.run(_closed(port, body, concurrency, duration_s, warmup_s))


def null_grpc_server(port: int, ready) -> None:
    """Serve ``ModelInfer`` with a fixed answer until killed (run it in its own process)."""
    asyncio.run(serve_null_grpc(port, ready))
