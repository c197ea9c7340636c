"""Pipeline recorders: OpenTelemetry metrics, alert-rule counters and the per-caller call log."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from alerting.rules import ModelCounters
from router.calllog import CallLog, CallRecord
from router.errors import QuotaExceeded, TimeshareError
from router.pipeline import Recorder
from router.schemas import InferenceRequest, InferenceResponse

__all__ = ["TelemetryRecorder", "CounterRecorder", "CallLogRecorder"]

_CACHE_LABEL = {"memory": "hit_local", "redis": "hit_redis", "semantic": "hit_semantic"}


class TelemetryRecorder(Recorder):
    def __init__(self, telemetry) -> None:
        self._t = telemetry

    def record(self, request, response, error, elapsed_s) -> None:
        if response is None:
            return
        self._t.record_request(
            model=response.model, route=response.route.route if response.route else "",
            served_by=response.served_by, cache=_CACHE_LABEL.get(response.cache, "miss"),
            degraded=response.degraded, duration_s=elapsed_s)
        if response.timings.queue_ms and response.pool is not None:
            self._t.record_queue_delay(model=response.model, priority=request.priority.label,
                                       device=response.pool,
                                       delay_s=response.timings.queue_ms / 1e3)


class CounterRecorder(Recorder):
    """Cumulative outcomes per model/route: what the alert rules evaluate."""

    def __init__(self, *, slow_s: float = 1.0) -> None:
        self._slow_s = slow_s
        self._counts: dict[str, list[int]] = {}

    def record(self, request, response, error, elapsed_s) -> None:
        c = self._counts.setdefault(request.model, [0, 0, 0, 0, 0])
        c[0] += 1
        if error is not None:
            # Caller mistakes (4xx) are not the service failing; quota rejections are shedding.
            if isinstance(error, QuotaExceeded):
                c[3] += 1
            elif not (isinstance(error, TimeshareError) and error.status_code < 500):
                c[1] += 1
            return
        if response is not None and response.degraded:
            c[2] += 1
            if (response.reason or "").startswith("shed"):
                c[3] += 1
        if elapsed_s > self._slow_s:
            c[4] += 1

    def snapshot(self) -> dict[str, ModelCounters]:
        return {m: ModelCounters(*c) for m, c in self._counts.items()}


class CallLogRecorder(Recorder):
    def __init__(self, log: CallLog, *, clock: Callable[[], float] = time.time) -> None:
        self.log = log
        self._clock = clock

    def record(self, request: InferenceRequest, response: InferenceResponse | None, error,
               elapsed_s) -> None:
        if response is None:
            return
        self.log.record(CallRecord(
            ts=self._clock(), request_id=request.request_id, caller=request.caller,
            model=request.model, version=response.version, served_by=response.served_by,
            device_ms=response.timings.compute_ms, cache=response.cache,
            degraded=response.degraded,
            bytes_in=_nbytes(request.inputs), bytes_out=_nbytes(response.outputs),
            priority=request.priority.label, caller_verified=request.caller_verified))


def _nbytes(arrays: Mapping[str, Any]) -> int:
    """Bytes of a request's or answer's tensors (a loop: no generator frame per request)."""
    total = 0
    for a in arrays.values():
        total += getattr(a, "nbytes", 0)
    return total
