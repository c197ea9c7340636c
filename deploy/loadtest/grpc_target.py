"""The gRPC target (``target: {grpc: host:port}``): load through the Open Inference Protocol's
``ModelInfer`` (router.grpc_v2), as ``tritonclient.grpc`` calls it: raw tensors, the request's
priority, caller and deadline as ``parameters``, the deadline also as the call's gRPC deadline.

It runs in this process, like the handle target, with the same open-loop accounting: planned
send times, waiting for one of ``max_connections`` concurrent calls counted as latency, and a
call unanswered ``timeout_s`` after its send a ``Timeout``. A failed call is an ``Outcome`` whose
error is ``grpc_<STATUS>`` (``grpc_UNAVAILABLE``, ``grpc_INVALID_ARGUMENT``...).
"""

from __future__ import annotations

import asyncio

import grpc

from deploy.loadtest.target import LoadRequest, Outcome
from router.grpc_v2._generated import grpc_predict_v2_pb2 as pb

__all__ = ["GrpcTarget", "infer_request"]

METHOD = "/inference.GRPCInferenceService/ModelInfer"


def infer_request(req: LoadRequest) -> pb.ModelInferRequest:
    """One load request as a ``ModelInferRequest`` with raw (little-endian) tensors."""
    out = pb.ModelInferRequest(model_name=req.model, model_version=req.version or "",
                               id=req.request_id)
    for name, (datatype, arr) in req.inputs.items():
        out.inputs.add(name=name, datatype=datatype, shape=list(arr.shape))
        out.raw_input_contents.append(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
    out.parameters["priority"].string_param = req.priority
    out.parameters["caller"].string_param = req.caller
    if req.deadline_ms is not None:
        out.parameters["deadline_ms"].double_param = req.deadline_ms
    return out


class GrpcTarget:
    """``Target`` calling ``ModelInfer`` on ``address`` (``host:port``) over one channel."""

    def __init__(self, address: str, *, timeout_s: float = 30.0,
                 max_connections: int = 256) -> None:
        self.address = address
        self._timeout = timeout_s
        self._slots = asyncio.Semaphore(max_connections)  # concurrent calls, FIFO waiters
        self._channel: grpc.aio.Channel | None = None
        self._call: grpc.aio.UnaryUnaryMultiCallable | None = None

    def _stub(self) -> grpc.aio.UnaryUnaryMultiCallable:
        if self._call is None:  # opened on first use, on the running loop
            self._channel = grpc.aio.insecure_channel(self.address)
            self._call = self._channel.unary_unary(
                METHOD, request_serializer=pb.ModelInferRequest.SerializeToString,
                response_deserializer=pb.ModelInferResponse.FromString)
        return self._call

    async def send(self, req: LoadRequest) -> Outcome:
        """Send one request; status codes and transport failures become ``Outcome.error``."""
        call = self._stub()
        body = infer_request(req)
        async with self._slots:
            timeout = self._timeout if req.deadline_ms is None else min(
                self._timeout, req.deadline_ms / 1e3 + 1.0)  # the server answers by then
            try:
                resp = await call(body, timeout=timeout)
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and timeout == self._timeout:
                    return Outcome(error="Timeout")
                return Outcome(error=f"grpc_{e.code().name}")
        p = resp.parameters
        return Outcome(status=200, degraded=p["degraded"].bool_param,
                       served_by=p["served_by"].string_param or None,
                       reason=p["reason"].string_param or None,
                       cache=p["cache"].string_param or None,
                       bytes_out=sum(len(b) for b in resp.raw_output_contents))

    async def aclose(self) -> None:
        if self._channel is not None:
            await self._channel.close()
