"""What the app's CPU pool did over a benchmark run, read from its ``/v2/status``.

``device_counters(port)`` reads the cumulative counters of the pool's device
(``pool._private.reporting.worker_status``: ``pools.cpu.device``); ``chunks_delta`` and
``compute_delta`` say what changed between two reads. Used by ``benchmarks.http_throughput``
(where the chunks ran: inline on the loop, or on the device thread) and
``benchmarks.overload_http`` (how long the device's forward passes took at each level, against
the capacity run's: on a busy host a device thread that shares its process waits for a core or
for the interpreter inside its forward, and the capacity it has left shrinks with it).
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

__all__ = ["chunks_delta", "compute_delta", "device_counters"]


def device_counters(port: int, *, pool: str = "cpu") -> dict[str, float] | None:
    """``pool``'s device counters on the app served at 127.0.0.1:``port`` (None where the
    status cannot be read, or has no such pool)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/status", timeout=10) as r:
            st = json.loads(r.read())
        dev = st["pools"][pool]["device"]
        return {"chunks": int(dev["chunks"]), "inline_chunks": int(dev["inline_chunks"]),
                "inline_waits": int(dev.get("inline_waits", 0)),
                "compute_s": float(dev.get("compute_s", 0.0))}
    except (OSError, KeyError, TypeError, ValueError):
        return None


def chunks_delta(before: dict[str, float] | None, after: dict[str, float] | None
                 ) -> dict[str, Any] | None:
    """What the pool did between two reads: chunks, the share run inline on the loop (a hop
    to the device thread costs the loop more than a small model's forward; None with no
    chunks, as a run of cache hits has), and the times a chunk waited for the device
    thread's batch to run inline after it (``policies.inline.waits_for_the_thread``)."""
    if before is None or after is None:
        return None
    chunks = int(after["chunks"] - before["chunks"])
    return {"chunks": chunks,
            "inline_share": round((after["inline_chunks"] - before["inline_chunks"])
                                  / chunks, 3) if chunks else None,
            "inline_waits": int(after["inline_waits"] - before["inline_waits"])}


def compute_delta(before: dict[str, float] | None, after: dict[str, float] | None, *,
                  seconds: float) -> dict[str, Any] | None:
    """The device's batches between two reads, their forward passes' mean time
    (``forward_ms``), and that time over ``seconds`` (``busy_share``: 1.0 is a device never
    idle). None where either read failed.

    >>> compute_delta({"chunks": 10, "compute_s": 0.2}, {"chunks": 110, "compute_s": 2.4},
    ...               seconds=2.5)
    {'batches': 100, 'forward_ms': 22.0, 'busy_share': 0.88}
    """
    if before is None or after is None:
        return None
    batches = int(after["chunks"] - before["chunks"])
    busy = after["compute_s"] - before["compute_s"]
    return {"batches": batches,
            "forward_ms": round(busy / batches * 1e3, 2) if batches else None,
            "busy_share": round(busy / seconds, 3) if seconds > 0 else None}
