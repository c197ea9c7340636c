"""A null ``ModelInfer`` server (fixed answer, request not parsed), in a child process: the gRPC
target's floor (``measure_floor``) and the gRPC benchmark's client cost."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc

from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb

__all__ = ["null_grpc", "serve_null_grpc"]


def _identity(b: bytes) -> bytes:
    return b


async def serve_null_grpc(port: int, on_ready: Any = None) -> None:
    """Serve until cancelled or killed; ``port`` 0 picks one (printed as ``PORT n``)."""
    answer = pb.ModelInferResponse(model_name="null")
    answer.parameters["degraded"].bool_param = False
    payload = answer.SerializeToString()

    async def infer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return payload

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService", {"ModelInfer": grpc.unary_unary_rpc_method_handler(
            infer, request_deserializer=_identity, response_serializer=_identity)}),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"PORT {bound}", flush=True)
    if on_ready is not None:
        on_ready.set()
    await server.wait_for_termination()


@contextlib.contextmanager
def null_grpc() -> Iterator[str]:
    """Start the null server in a child process; yields its ``host:port``; stops it after."""
    code = ("import asyncio; from deploy.loadtest._private.grpc_null import serve_null_grpc; "
            "asyncio.run(serve_null_grpc(0))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("PORT "):
            raise RuntimeError(f"null gRPC server did not start (exit {proc.poll()}): {line!r}")
        yield f"127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.kill()
        proc.wait(timeout=10)
