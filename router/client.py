"""Typed client for other Ray applications.

    from router.client import TimeshareClient
    client = TimeshareClient()                       # serve.get_app_handle("timeshare")
    resp = client.infer("digits-small", {"pixels": x}, priority="realtime", deadline_ms=200)
    resp = await client.infer_async("digits-small", {"pixels": x})

Errors arrive as the typed exceptions of ``router.errors`` (InvalidRequest, ModelNotFound,
PayloadTooLarge, QuotaExceeded, ...), unwrapped from Ray's task-error wrapper.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.exceptions import RayTaskError

from router.errors import TimeshareError
from router.schemas import CacheControl, InferenceRequest, InferenceResponse

__all__ = ["TimeshareClient"]


class TimeshareClient:
    def __init__(self, handle=None, *, app_name: str = "timeshare") -> None:
        self._handle = handle if handle is not None else serve.get_app_handle(app_name)

    @staticmethod
    def request(model: str, inputs: dict[str, Any], **fields: Any) -> InferenceRequest:
        if isinstance(fields.get("cache"), dict):
            fields["cache"] = CacheControl(**fields["cache"])
        return InferenceRequest(model=model, inputs=inputs, **fields)

    def infer(self, model: str, inputs: dict[str, Any], **fields: Any) -> InferenceResponse:
        """Blocking call (from a driver or a sync context)."""
        try:
            return self._handle.infer.remote(self.request(model, inputs, **fields)).result()
        except RayTaskError as e:
            raise _unwrap(e) from None

    async def infer_async(self, model: str, inputs: dict[str, Any],
                          **fields: Any) -> InferenceResponse:
        """Awaitable call (from inside another deployment)."""
        try:
            return await self._handle.infer.remote(self.request(model, inputs, **fields))
        except RayTaskError as e:
            raise _unwrap(e) from None

    def status(self) -> dict:
        return self._handle.status.remote().result()


def _unwrap(e: RayTaskError) -> BaseException:
    cause = getattr(e, "cause", None)
    return cause if isinstance(cause, TimeshareError) else e
