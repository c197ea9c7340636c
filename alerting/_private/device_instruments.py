"""Observable instruments over the pools' device counters, read when metrics are collected.

Nothing is recorded on the request path: each collection (a Prometheus scrape) calls ``read``
once per instrument and reports the counters the pool replicas published last. Names follow the
Prometheus conventions through OpenTelemetry's exporter (``.`` -> ``_``, the unit as a suffix,
``_total`` on counters); memory follows the semantic conventions' ``*.memory.usage`` (with a
``state`` attribute) and ``*.memory.limit`` pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = ["DeviceSample", "PRIORITY_LABELS", "register_device_instruments"]

PRIORITY_LABELS = ("realtime", "interactive", "batch", "background")  # by Priority value


class DeviceSample(Protocol):
    """What a pool replica reports (``pool.DeviceCounters`` has these fields)."""

    @property
    def device(self) -> str: ...
    @property
    def replica(self) -> str: ...
    @property
    def swaps_in(self) -> int: ...
    @property
    def swaps_out(self) -> int: ...
    @property
    def swap_bytes(self) -> int: ...
    @property
    def swap_seconds(self) -> float: ...
    @property
    def batches(self) -> int: ...
    @property
    def compute_seconds(self) -> float: ...
    @property
    def evictions(self) -> int: ...
    @property
    def preemptions(self) -> tuple[int, int, int, int]: ...
    @property
    def queue_depth(self) -> tuple[int, int, int, int]: ...
    @property
    def memory_used_bytes(self) -> int: ...
    @property
    def memory_free_bytes(self) -> int: ...
    @property
    def memory_total_bytes(self) -> int: ...
    @property
    def host_used_bytes(self) -> int: ...
    @property
    def resident(self) -> tuple[tuple[str, int], ...]: ...
    @property
    def hosted(self) -> tuple[str, ...]: ...


Read = Callable[[], Iterable[tuple[str, DeviceSample]]]
Values = Callable[[DeviceSample], Iterable[tuple[float, dict[str, str]]]]


def _callback(read: Read, values: Values):
    def observe(_: CallbackOptions) -> Iterator[Observation]:
        for pool, s in read():
            base = {"pool": pool, "device": s.device, "replica": s.replica}
            for value, extra in values(s):
                yield Observation(value, {**base, **extra})

    return observe


def _by_class(counts: tuple[int, int, int, int]) -> list[tuple[float, dict[str, str]]]:
    return [(n, {"priority": p}) for p, n in zip(PRIORITY_LABELS, counts, strict=True)]


# (kind, OpenTelemetry name, unit, description, values). Prometheus name in the comment.
_INSTRUMENTS: list[tuple[str, str, str, str, Values]] = [
    # timeshare_swaps_total{direction}
    ("counter", "timeshare.swaps", "", "Model swaps: in = host -> device copy, out = device "
     "copy freed", lambda s: [(s.swaps_in, {"direction": "in"}),
                              (s.swaps_out, {"direction": "out"})]),
    # timeshare_swap_bytes_total
    ("counter", "timeshare.swap", "By", "Bytes copied host -> device by swap-ins",
     lambda s: [(s.swap_bytes, {})]),
    # timeshare_swap_duration_seconds_total
    ("counter", "timeshare.swap.duration", "s", "Seconds spent in swap-ins (reserve + copy)",
     lambda s: [(s.swap_seconds, {})]),
    # timeshare_batches_total
    ("counter", "timeshare.batches", "", "Batches the device completed",
     lambda s: [(s.batches, {})]),
    # timeshare_compute_duration_seconds_total: its rate is the device's busy share
    ("counter", "timeshare.compute.duration", "s", "Seconds the device spent in completed "
     "batches' forward passes (CUDA events on a GPU, wall time on the CPU device)",
     lambda s: [(s.compute_seconds, {})]),
    # timeshare_preemptions_total{priority}: the class that took the device
    ("counter", "timeshare.preemptions", "", "Started batches preempted at a chunk boundary",
     lambda s: _by_class(s.preemptions)),
    # timeshare_evictions_total
    ("counter", "timeshare.evictions", "", "Models evicted from device memory",
     lambda s: [(s.evictions, {})]),
    # timeshare_queue_depth{priority}
    ("gauge", "timeshare.queue.depth", "", "Requests queued on the device, by priority class",
     lambda s: _by_class(s.queue_depth)),
    # timeshare_device_memory_usage_bytes{state=used|free}
    ("gauge", "timeshare.device.memory.usage", "By", "Device memory for model weights",
     lambda s: [(s.memory_used_bytes, {"state": "used"}),
                (s.memory_free_bytes, {"state": "free"})]),
    # timeshare_device_memory_limit_bytes
    ("gauge", "timeshare.device.memory.limit", "By", "Device memory budget for model weights",
     lambda s: [(s.memory_total_bytes, {})]),
    # timeshare_host_memory_usage_bytes
    ("gauge", "timeshare.host.memory.usage", "By", "Host-tier memory holding model weights",
     lambda s: [(s.host_used_bytes, {})]),
    # timeshare_models_resident{tier=device|host}
    ("gauge", "timeshare.models.resident", "", "Models resident in a tier",
     lambda s: [(len(s.resident), {"tier": "device"}), (len(s.hosted), {"tier": "host"})]),
]


def register_device_instruments(meter: Meter, read: Read,
                                restarts: Callable[[], dict[str, int]]) -> None:
    """Register the pool instruments on ``meter``; ``read`` yields (pool, sample) per replica,
    ``restarts`` the replica restarts seen per pool (``timeshare_pool_replica_restarts_total``)."""
    for kind, name, unit, description, values in _INSTRUMENTS:
        create = (meter.create_observable_counter if kind == "counter"
                  else meter.create_observable_gauge)
        create(name, callbacks=[_callback(read, values)], unit=unit, description=description)

    def observe_restarts(_: CallbackOptions) -> Iterator[Observation]:
        for pool, n in restarts().items():
            yield Observation(n, {"pool": pool})

    meter.create_observable_counter(
        "timeshare.pool.replica.restarts", callbacks=[observe_restarts],
        description="Pool replicas replaced (a new incarnation in a known replica rank)")
