"""The ingress as its front ends see it: what the HTTP routes, the v2 fast path and the gRPC
service call. A protocol, beneath all three, so none of them imports another for it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from router.schemas import InferenceRequest, InferenceResponse

__all__ = ["Frontend"]


class Frontend(Protocol):
    """What the HTTP and gRPC layers need from the ingress (``router.ingress`` implements it)."""

    api_key: str | None
    max_body_bytes: int

    # One request its front end has already let through its gate (router.edge.EdgeGate); the
    # ingress's handle method ``infer`` is the gated way in for Python callers.
    async def answer(self, request: InferenceRequest) -> InferenceResponse: ...
    def stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]: ...
    def live_models(self) -> dict[str, Any]: ...
    async def model_metadata(self, name: str, version: str | None) -> dict[str, Any]: ...
    async def model_ready(self, name: str, version: str | None) -> None: ...
    async def repository_index(self) -> list[dict[str, Any]]: ...
    async def load_model(self, name: str) -> dict[str, Any]: ...
    async def unload_model(self, name: str) -> dict[str, Any]: ...
    async def status(self) -> dict[str, Any]: ...
