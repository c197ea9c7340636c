"""What the load generator sends to: the ``Target`` protocol, the request and outcome types and
the v2 body builders (the HTTP target is ``deploy.loadtest.http_target``).

A target turns one ``LoadRequest`` into one ``Outcome``. It never raises for a failed call: the
failure becomes ``Outcome.error`` with a class name (``http_503``, ``Timeout``...), so the
generator's accounting is the same whatever the transport. Latency is NOT measured here: the
generator measures from the planned send time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["CallableTarget", "LoadRequest", "Outcome", "Target", "v2_body"]


@dataclass(frozen=True, slots=True)
class LoadRequest:
    """One planned request. ``inputs`` maps input name -> (wire datatype, array)."""

    request_id: str
    model: str
    inputs: dict[str, tuple[str, np.ndarray]]
    priority: str = "interactive"
    caller: str = "loadtest"
    deadline_ms: float | None = None
    version: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What came back. ``error`` is None on success, else a short class name."""

    error: str | None = None
    status: int | None = None
    degraded: bool = False
    served_by: str | None = None
    reason: str | None = None
    cache: str | None = None
    bytes_out: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class Target(Protocol):
    """Anything the generator can load: one async ``send`` per request; ``aclose`` at the end."""

    async def send(self, req: LoadRequest) -> Outcome:
        """Send one request and report what came back; never raises for a failed call."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def v2_params(req: LoadRequest) -> dict[str, Any]:
    """The ``parameters`` object of one request's v2 body."""
    params: dict[str, Any] = {"priority": req.priority, "caller": req.caller}
    if req.deadline_ms is not None:
        params["deadline_ms"] = req.deadline_ms
    return params


def v2_inputs(req: LoadRequest) -> list[dict[str, Any]]:
    """The ``inputs`` list of one request's v2 body."""
    return [
        {"name": name, "shape": list(arr.shape), "datatype": dt, "data": arr.ravel().tolist()}
        for name, (dt, arr) in req.inputs.items()
    ]


def v2_body(req: LoadRequest) -> dict[str, Any]:
    """KServe v2 / Open Inference Protocol JSON body of one request."""
    return {"id": req.request_id, "inputs": v2_inputs(req), "parameters": v2_params(req)}


class CallableTarget:
    """Adapts ``async def fn(req) -> Outcome`` (e.g. a Ray handle call) to ``Target``.

    Exceptions raised by ``fn`` become ``Outcome.error`` with the exception's type name.
    """

    def __init__(self, fn: Callable[[LoadRequest], Awaitable[Outcome]]) -> None:
        self._fn = fn

    async def send(self, req: LoadRequest) -> Outcome:
        try:
            return await self._fn(req)
        except Exception as e:  # noqa: BLE001 - a failed call is an outcome, never a crash
            return Outcome(error=type(e).__name__)

    async def aclose(self) -> None:
        return None
