"""Per-request call log for cost attribution: who called what, where it ran, what it cost.

Serving never waits on the log: ``CallLog.record`` puts the record on a bounded in-memory queue
and returns at once; a background task drains the queue in batches to a sink (a Redis stream when
configured, a JSON-lines file otherwise). When the queue is full the record is dropped and
counted (``stats.dropped``); a failing sink is logged and counted, never raised to serving.

Usage::

    log = build_call_log(path="var/calllog.jsonl")       # or redis_url="redis://..."
    log.record(CallRecord(ts=time.time(), request_id=..., caller="team-a", model="digits", ...))
    ...
    await log.close()                                     # flushes what is queued

``timeshare usage`` (``deploy/usage.py``) reads either sink back.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol

import orjson
import redis.asyncio as aioredis

from common.tasks import cancel_and_wait

__all__ = [
    "CallLog",
    "CallLogSink",
    "CallLogStats",
    "CallRecord",
    "JsonlSink",
    "RedisStreamSink",
    "build_call_log",
]

_log = logging.getLogger(__name__)

DEFAULT_STREAM = "timeshare:calls"


@dataclass(slots=True)
class CallRecord:
    """One answered request. ``ts`` is Unix seconds; ``model`` is what the caller named (a model
    or a route); ``served_by`` is what actually answered; ``device_ms`` the compute time billed.

    Not frozen, though nothing changes a record once built: one is built per request, and a
    frozen dataclass sets each of these thirteen fields through ``object.__setattr__`` (2.0
    against 0.7 µs, docs/PERFORMANCE.md, fourteenth session)."""

    ts: float
    request_id: str
    caller: str
    model: str
    version: str | None
    served_by: str
    device_ms: float
    cache: str
    degraded: bool
    bytes_in: int
    bytes_out: int
    priority: str
    # True when a caller key proved ``caller``; false for self-declared and anonymous callers.
    # ``request_id`` is the client's choice: kept for correlation, never used as an identity.
    caller_verified: bool = False

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, the fields in order (a dict literal: orjson writes a dict in a
        quarter of the time it takes over the dataclass, and ``asdict`` copies recursively)."""
        return {"ts": self.ts, "request_id": self.request_id, "caller": self.caller,
                "model": self.model, "version": self.version, "served_by": self.served_by,
                "device_ms": self.device_ms, "cache": self.cache, "degraded": self.degraded,
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "priority": self.priority, "caller_verified": self.caller_verified}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CallRecord:
        """Inverse of ``to_dict``; raises ``ValueError`` naming a missing or bad field."""
        try:
            return cls(
                ts=float(d["ts"]), request_id=str(d["request_id"]), caller=str(d["caller"]),
                model=str(d["model"]),
                version=None if d.get("version") in (None, "") else str(d["version"]),
                served_by=str(d["served_by"]), device_ms=float(d["device_ms"]),
                cache=str(d["cache"]), degraded=_to_bool(d["degraded"]),
                bytes_in=int(d["bytes_in"]), bytes_out=int(d["bytes_out"]),
                priority=str(d["priority"]),
                caller_verified=_to_bool(d.get("caller_verified", False)),
            )
        except KeyError as e:
            raise ValueError(f"call record: missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"call record: bad value ({e})") from None

    def to_fields(self) -> dict[str, str]:
        """Flat string fields for a Redis stream entry (None -> empty string)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = "" if v is None else ("1" if v is True else "0" if v is False else str(v))
        return out


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (bytes, str)):
        s = v.decode() if isinstance(v, bytes) else v
        if s.lower() in ("1", "true"):
            return True
        if s.lower() in ("0", "false", ""):
            return False
    raise ValueError(f"degraded must be a boolean, got {v!r}")


class CallLogSink(Protocol):
    """Where batches of records go. ``write`` may be slow; it runs off the serving path."""

    async def write(self, records: list[CallRecord]) -> None:
        """Persist a batch; raise on failure (the log counts it and carries on)."""
        ...

    async def aclose(self) -> None:
        """Release files or connections."""
        ...


class JsonlSink:
    """Appends one JSON object per line. With ``max_bytes``, a file that would grow past it is
    renamed to ``<path>.1`` (older ones shift up to ``<path>.<backups>``, the oldest deleted).
    File I/O runs in a worker thread so the event loop never blocks on the disk."""

    def __init__(self, path: str | Path, *, max_bytes: int | None = None,
                 backups: int = 5) -> None:
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        if backups < 1:
            raise ValueError(f"backups must be >= 1, got {backups}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups

    def _rotate(self) -> None:
        for i in range(self.backups - 1, 0, -1):
            src = self.path.with_name(f"{self.path.name}.{i}")
            if src.exists():
                os.replace(src, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def _write_sync(self, records: list[CallRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # orjson over ``to_dict``'s literal: this thread shares the ingress's GIL, and this is
        # 0.5 µs a record against 1.0 over the dataclass (``asdict`` + ``json.dumps``: ~5 µs)
        data = b"".join(orjson.dumps(r.to_dict(), option=orjson.OPT_APPEND_NEWLINE)
                        for r in records)
        if (self.max_bytes is not None and self.path.exists()
                and self.path.stat().st_size + len(data) > self.max_bytes
                and self.path.stat().st_size > 0):
            self._rotate()
        with open(self.path, "ab") as f:
            f.write(data)

    async def write(self, records: list[CallRecord]) -> None:
        await asyncio.to_thread(self._write_sync, records)

    async def aclose(self) -> None:
        return None


class RedisStreamSink:
    """``XADD stream MAXLEN ~ maxlen * field value ...`` per record, pipelined per batch.

    ``maxlen`` bounds the stream (approximate trimming, cheap for Redis)."""

    def __init__(self, url: str, *, stream: str = DEFAULT_STREAM, maxlen: int = 1_000_000,
                 client: Any = None) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen must be >= 1, got {maxlen}")

        self.stream = stream
        self.maxlen = maxlen
        self._redis = client or aioredis.Redis.from_url(url, socket_timeout=5,
                                                        socket_connect_timeout=2)

    async def write(self, records: list[CallRecord]) -> None:
        pipe = self._redis.pipeline(transaction=False)
        for r in records:
            entry: dict[Any, Any] = r.to_fields()  # redis-py's field type is invariant
            pipe.xadd(self.stream, entry, maxlen=self.maxlen, approximate=True)
        await pipe.execute()

    async def aclose(self) -> None:
        await self._redis.aclose()


@dataclass(slots=True)
class CallLogStats:
    """Counters: records written, dropped (queue full) and lost to sink errors."""

    written: int = 0
    dropped: int = 0
    failed: int = 0
    sink_errors: int = 0


class CallLog:
    """Asynchronous writer: ``record`` never blocks; a background task drains to ``sink``.

    ``max_queue`` bounds memory (records beyond it are dropped and counted); ``batch_size``
    bounds one sink write. ``linger_s``: after a record arrives the drain waits this long for
    more before writing, so a steady trickle costs one sink write (a thread hop for files) per
    ``linger_s`` instead of one per request; records are at most that much later on disk, and
    ``close`` flushes. The drain task starts on the first ``record`` (or ``start``) and must
    run inside an event loop. Records wait in a plain list, not an ``asyncio.Queue``: a record
    is one append on the request path, and the drain takes them a batch at a time.
    """

    def __init__(self, sink: CallLogSink, *, max_queue: int = 10_000,
                 batch_size: int = 256, linger_s: float = 0.05) -> None:
        if max_queue < 1 or batch_size < 1:
            raise ValueError(f"max_queue and batch_size must be >= 1, got max_queue={max_queue} "
                             f"batch_size={batch_size}")
        self.sink = sink
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.linger_s = max(0.0, linger_s)
        self.stats = CallLogStats()
        self._queued: list[CallRecord] = []
        self._wake: asyncio.Event | None = None
        self._writing = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def pending(self) -> int:
        """Records queued, not yet written (a batch being written is not counted)."""
        return len(self._queued)

    def start(self) -> None:
        """Start the drain task (idempotent); needs a running event loop."""
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="calllog")
            if self._queued:
                self._wake.set()

    def record(self, rec: CallRecord) -> bool:
        """Queue ``rec`` without waiting; False (and counted) if dropped or closed."""
        queued = self._queued
        if self._closed or len(queued) >= self.max_queue:
            self.stats.dropped += 1
            return False
        queued.append(rec)
        if len(queued) == 1 or self._task is None:  # the drain sleeps on an empty list
            self.start()
            assert self._wake is not None
            self._wake.set()
        return True

    async def _drain(self) -> None:
        assert self._wake is not None
        wake, queued = self._wake, self._queued
        while True:
            await wake.wait()
            if self.linger_s and len(queued) < self.batch_size and not self._closed:
                await asyncio.sleep(self.linger_s)
            batch = queued[: self.batch_size]
            del queued[: self.batch_size]
            if not queued:  # the next record wakes the drain (and lingers again)
                wake.clear()
            if batch:
                await self._write(batch)

    async def _write(self, batch: list[CallRecord]) -> None:
        self._writing = True
        try:
            await self.sink.write(batch)
            self.stats.written += len(batch)
        except Exception:  # noqa: BLE001 - a broken sink must never reach serving
            self.stats.sink_errors += 1
            self.stats.failed += len(batch)
            _log.exception("call log: sink write of %d records failed", len(batch))
        finally:
            self._writing = False

    async def close(self, *, timeout_s: float = 10.0) -> None:
        """Stop accepting records, flush the queue (up to ``timeout_s``), close the sink."""
        self._closed = True
        if self._task is not None:
            if self._wake is not None:
                self._wake.set()  # no linger: write what is queued now
            loop = asyncio.get_running_loop()
            until = loop.time() + timeout_s
            while (self._queued or self._writing) and loop.time() < until:
                await asyncio.sleep(0.005)
            if self._queued or self._writing:
                _log.warning("call log: %d records not flushed within %.1fs", self.pending,
                             timeout_s)
            await cancel_and_wait([self._task])
        await self.sink.aclose()


def build_call_log(*, path: str | Path | None = None, redis_url: str | None = None,
                   stream: str = DEFAULT_STREAM, maxlen: int = 1_000_000,
                   max_bytes: int | None = None, max_queue: int = 10_000) -> CallLog:
    """A ``CallLog`` on a Redis stream when ``redis_url`` is given, else on the JSONL ``path``."""
    if redis_url:
        return CallLog(RedisStreamSink(redis_url, stream=stream, maxlen=maxlen),
                       max_queue=max_queue)
    if path is None:
        raise ValueError("call log: give path (JSON lines file) or redis_url")
    return CallLog(JsonlSink(path, max_bytes=max_bytes), max_queue=max_queue)
