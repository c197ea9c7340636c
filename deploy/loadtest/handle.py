"""The handle target (``target: {app: timeshare}``): load through a Ray Serve app handle.

This measures what another Ray application sees: ``serve.get_app_handle(app).infer.remote`` with
a typed ``InferenceRequest``, from this process (a Ray driver). It runs in-process with the same
open-loop accounting as the HTTP target: planned send times, queueing for one of
``max_connections`` concurrent calls counted as latency, timeouts for calls still pending.
"""

from __future__ import annotations

from typing import Any

from deploy.loadtest.target import LoadRequest, Outcome

__all__ = ["HandleTarget", "connect_app"]


def connect_app(app: str) -> Any:
    """The app's handle, joining the running Ray cluster (``address="auto"``) when this process
    is not a Ray driver yet. Raises ``ValueError`` naming the app when it cannot be reached."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        try:
            ray.init(address="auto", namespace="serve", log_to_driver=False)
        except ConnectionError as e:
            raise ValueError(f"target.app {app!r}: no running Ray cluster to join ({e})") from None
    try:
        return serve.get_app_handle(app)
    except Exception as e:  # noqa: BLE001 - Ray raises several kinds for a missing app
        raise ValueError(f"target.app {app!r}: not a running Serve application ({e})") from None


class HandleTarget:
    """``Target`` calling ``handle.infer.remote(InferenceRequest)``; exceptions (the router's
    typed errors, unwrapped from Ray's wrapper) become ``Outcome.error`` with their class name."""

    def __init__(self, handle: Any) -> None:
        from router.schemas import InferenceRequest

        self._handle = handle
        self._request = InferenceRequest

    async def send(self, req: LoadRequest) -> Outcome:
        """Send one request through the handle; never raises for a failed call."""
        from ray.exceptions import RayTaskError

        try:
            ir = self._request.model_validate({
                "model": req.model, "version": req.version, "priority": req.priority,
                "caller": req.caller, "deadline_ms": req.deadline_ms,
                "request_id": req.request_id,
                "inputs": {name: arr for name, (_, arr) in req.inputs.items()},
            })
            resp = await self._handle.infer.remote(ir)
        except RayTaskError as e:
            cause = getattr(e, "cause", None)
            return Outcome(error=type(cause if cause is not None else e).__name__)
        except Exception as e:  # noqa: BLE001 - a failed call is an outcome, never a crash
            return Outcome(error=type(e).__name__)
        return Outcome(status=200, degraded=bool(resp.degraded), served_by=resp.served_by,
                       reason=resp.reason, cache=resp.cache)

    async def aclose(self) -> None:
        return None
