"""Timeshare's gRPC listener in each ingress replica (#39), beside its HTTP listener
(``router.listener``): a ``grpc.aio`` server on the replica's own event loop, serving
``inference.GRPCInferenceService`` (``router.grpc_v2.service``).

Why here and not behind Ray Serve's gRPC proxy: the proxy runs the same ``grpc.aio`` server
and adds a hop (proxy actor, then a handle call into the replica) to every call, the hop that
Timeshare's HTTP listener already skips for 1.5-2x the requests per second
(docs/PERFORMANCE.md). That is reasoned, not measured: ``benchmarks.grpc_throughput`` measures
this listener beside HTTP only (docs/BENCHMARKS.md).

- Every ingress replica of a node binds the same port (gRPC sets ``SO_REUSEPORT``): the kernel
  spreads connections over them, as with the HTTP listener.
- Messages over ``max_message_bytes`` are refused by gRPC itself, ``RESOURCE_EXHAUSTED``,
  before they are decoded.
- Stopping: the ingress's ``__del__`` stops accepting and lets calls in flight finish for up to
  ``drain_s``.
"""

from __future__ import annotations

import logging

import grpc
from pydantic import BaseModel, ConfigDict, Field

from router.grpc_v2.service import InferenceService

__all__ = ["GrpcListener", "GrpcSettings", "start_grpc"]

log = logging.getLogger("ray.serve")


class GrpcSettings(BaseModel):
    """``grpc:`` in the app settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int | None = Field(
        None, ge=1, le=65535, description="Serve inference.GRPCInferenceService (the Open "
        "Inference Protocol over gRPC) on this port from every ingress replica; null = off.")
    host: str = Field("127.0.0.1", description="Address to bind; 0.0.0.0 for other machines.")
    max_message_bytes: int | None = Field(
        None, gt=0, description="Largest request message; bigger ones are refused "
        "(RESOURCE_EXHAUSTED) before decoding. Null: the app's max_body_bytes.")
    deadline_margin_ms: float = Field(
        20.0, ge=0, description="Taken off a call's gRPC deadline to make the request's: its "
        "answer (at worst its fallback's) is on the wire before the client gives up.")
    request_start: bool = Field(
        True, description="Start a call's deadline at its front proxy's x-request-start "
        "metadata when it has one (router.front_stamp, as edge.request_start does for HTTP): "
        "the wait in front of this server counts against the call's gRPC deadline and its "
        "deadline_ms. Turn it off behind a proxy that both stamps and shortens the gRPC "
        "deadline it forwards by the time a call waited, or the wait would count twice. Needs "
        "the front's clock synchronised with this host's.")
    request_start_max_age_s: float = Field(
        30.0, gt=0, description="An x-request-start stamp older than this is ignored (a wrong "
        "unit or a broken clock), not held against the call.")
    stream_max_in_flight: int = Field(
        64, ge=1, description="Requests of one ModelStreamInfer stream running at once; past "
        "it the server stops reading that stream until one finishes (HTTP/2 flow control then "
        "holds the client back).")
    drain_s: float = Field(10.0, ge=0, description="On shutdown, wait this long for calls in "
                                                   "flight before closing connections.")


class GrpcListener:
    """One ``grpc.aio`` server on the running loop, serving ``service`` until :meth:`stop`."""

    def __init__(self, service: InferenceService, settings: GrpcSettings, *,
                 max_message_bytes: int) -> None:
        if settings.port is None:
            raise ValueError("grpc.port is not set")
        self.settings = settings
        self.service = service
        limit = settings.max_message_bytes or max_message_bytes
        self._server = grpc.aio.server(options=[
            ("grpc.so_reuseport", 1),
            ("grpc.max_receive_message_length", limit),
            # answers carry the outputs of at most as many rows as a request may send
            ("grpc.max_send_message_length", max(limit, 64 << 20)),
        ])
        self._server.add_generic_rpc_handlers((service.handler(),))
        self.port: int | None = None

    async def start(self) -> None:
        """Bind (failing here, naming the address, when it cannot) and start serving."""
        s = self.settings
        address = f"[{s.host}]:{s.port}" if ":" in s.host else f"{s.host}:{s.port}"
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as e:
            raise RuntimeError(f"grpc: cannot bind {address}: {e}") from e
        if not self.port:
            raise RuntimeError(f"grpc: cannot bind {address}")
        await self._server.start()
        log.info("timeshare: gRPC listener on %s", address)

    async def stop(self) -> None:
        """Stop accepting, let calls in flight finish (up to ``drain_s``), close."""
        await self._server.stop(self.settings.drain_s)


async def start_grpc(service: InferenceService, settings: GrpcSettings, *,
                     max_message_bytes: int) -> GrpcListener | None:
    """The started listener, or None when ``settings.port`` is not set."""
    if settings.port is None:
        return None
    listener = GrpcListener(service, settings, max_message_bytes=max_message_bytes)
    await listener.start()
    return listener
