"""The alerter core: takes alert events, runs the engine, delivers through channels.

Ray-free. ``submit`` is synchronous and cheap (it never waits on I/O); a background task
(``start``/``run``) flushes due groups and hands notifications to channel queues. With a
``redis_url`` the notification log survives restarts, so alerts already notified are not
re-paged; when Redis is unreachable it falls back to memory and says so in ``status()``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import httpx

from alerting._private.nflog import NotificationLog
from alerting._private.state import MemoryStore, RedisStore
from alerting.channels import LogChannel, build_channel
from alerting.clock import Clock, SystemClock
from alerting.config import AlertingConfig, LogChannelConfig
from alerting.delivery import Channel, DeliveryResult
from alerting.engine import EngineFull, NotificationEngine
from alerting.events import ENV_LABEL, SEVERITY_LABEL, Alert, Severity, parse_severity
from alerting.notification import Notification
from alerting.telemetry import Telemetry
from common.tasks import cancel_and_wait

__all__ = ["Alerter"]

log = logging.getLogger("alerting")

_STORE_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncio.TimeoutError)
try:
    import redis.exceptions as _rexc

    _STORE_ERRORS += (_rexc.RedisError,)
except ImportError:  # pragma: no cover - redis is a dependency
    pass


class Alerter:
    """One per application. See the module docstring.

    Inside the app's event loop (an illustration, not run)::

        alerter = Alerter(config)
        await alerter.start()              # loads state, starts the loop
        alerter.submit(alert)              # from any pipeline stage; returns at once
        await alerter.stop()
    """

    STATE_RETRY_S = 30.0  # how often to retry Redis when it was unreachable at start

    def __init__(
        self,
        config: AlertingConfig,
        *,
        clock: Clock | None = None,
        client: httpx.AsyncClient | None = None,
        environ: Mapping[str, str] | None = None,
        telemetry: Telemetry | None = None,
        channel_options: Mapping[str, Any] | None = None,
        persist: bool = True,
    ) -> None:
        self.config = config
        self.policy = config.effective_policy()
        self._clock = clock or SystemClock
        self._own_client = client is None
        self._client = client or httpx.AsyncClient()
        self._telemetry = telemetry
        self._nflog = NotificationLog(retention=config.state_retention)
        self.engine = NotificationEngine.from_config(config, nflog=self._nflog)
        self._store: MemoryStore | RedisStore = MemoryStore()
        self._persist = persist and bool(config.redis_url)
        self._retry_load_at: float | None = None  # monotonic; set while Redis was unreachable
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._test_results: list[DeliveryResult] = []
        self.rejected = 0
        kw = {
            "client": self._client,
            "clock": self._clock,
            "on_result": self._on_result,
            "on_drop": self._on_drop,
            **(channel_options or {}),
        }
        env = os.environ if environ is None else environ
        self.channels: dict[str, list[Channel]] = {}
        for r in config.receivers:
            if self.policy.log_only:
                self.channels[r.name] = [
                    LogChannel(f"{r.name}/log/0", r.name, LogChannelConfig(), **kw)
                ]
            else:
                self.channels[r.name] = [
                    build_channel(r.name, i, c, environ=env, **kw) for i, c in enumerate(r.channels)
                ]
        if telemetry is not None:  # counters start at 0, so a first drop is an increase
            for ch in self._all_channels():
                telemetry.record_alert_dropped(channel=ch.name, count=0)

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def persistence(self) -> str:
        """``redis`` or ``memory``."""
        return self._store.kind

    async def start(self) -> None:
        """Load persisted state (falling back to memory) and start the background loop."""
        await self.load_state()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="alerter")

    async def load_state(self) -> None:
        if not self._persist or self._store.kind == "redis":
            return
        store = RedisStore(
            self.config.redis_url or "",
            prefix=self.config.state_prefix,
            retention=self.config.state_retention,
        )
        try:
            entries, acks = await store.load()
        except _STORE_ERRORS as e:
            log.warning(
                "alerting state: Redis at %s unreachable (%s); keeping state in memory, "
                "retrying every %.0f s",
                self.config.redis_url,
                e,
                self.STATE_RETRY_S,
            )
            await _close_quietly(store)
            self._retry_load_at = time.monotonic() + self.STATE_RETRY_S
            return
        self._store, self._retry_load_at = store, None
        # What this replica decided while Redis was away wins, and goes to Redis at the next save.
        self._nflog.dirty |= set(self._nflog.entries)
        self._nflog.acks_dirty = bool(self._nflog.acknowledged - acks)
        for key, entry in entries.items():
            self._nflog.entries.setdefault(key, entry)
        self._nflog.acknowledged |= acks

    async def stop(self, *, drain_timeout: float = 5.0) -> None:
        """Stop the loop, give channels ``drain_timeout`` seconds to deliver, then close."""
        # cancel_and_wait cancels again while the loop runs on: a library under an await in it
        # (a Redis client converting a cancel into its own error) can swallow one cancel, and
        # the loop would then outlive stop() (a CI hang, 2026-11-24).
        await cancel_and_wait([self._task])
        self._task = None
        await self._save()
        await asyncio.gather(*(ch.drain(drain_timeout) for ch in self._all_channels()))
        for ch in self._all_channels():
            await ch.close()
        await _close_quietly(self._store)
        if self._own_client:
            await self._client.aclose()

    async def run(self) -> None:
        """Loop: flush due groups, then sleep until the next is due (at most ``tick_interval``)."""
        while True:
            try:
                await self.step()
            except Exception:  # keep alerting alive whatever one step did
                log.exception("alerter step failed")
            due = self.engine.next_due()
            wait = self.config.tick_interval
            if due is not None:
                wait = min(wait, max(0.0, due - self._clock()))
            self._wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as its timeout fires, and this loop would then outlive stop() (a hang).
            try:
                async with asyncio.timeout(max(wait, 0.01)):
                    await self._wake.wait()
            except TimeoutError:
                pass

    # -- events -----------------------------------------------------------------------------
    def submit(self, alert: Alert | Mapping[str, Any]) -> bool:
        """Accept an alert (or its dict form); never blocks. False when it was dropped."""
        a = alert if isinstance(alert, Alert) else Alert.from_dict(alert)
        a = self._apply_policy(a)
        try:
            self.engine.put(a, self._clock())
        except EngineFull as e:
            self.rejected += 1
            log.warning("%s", e)
            return False
        self._wake.set()
        return True

    def _apply_policy(self, a: Alert) -> Alert:
        labels: dict[str, str] = {}
        if a.labels.get(ENV_LABEL) != self.config.environment:
            labels[ENV_LABEL] = self.config.environment
        sev = a.severity
        capped = sev.cap(self.policy.max_severity)
        if capped is not sev or SEVERITY_LABEL not in a.labels:
            labels[SEVERITY_LABEL] = capped.value
        if not labels:
            return a
        out = a.with_labels(**labels)
        if capped is not sev:
            out = out.with_annotations(original_severity=sev.value)
        return out

    async def step(self) -> list[Notification]:
        """Flush due groups at the clock's now, enqueue notifications, persist what changed."""
        if self._retry_load_at is not None and time.monotonic() >= self._retry_load_at:
            await self.load_state()  # Redis was unreachable at start: try again
        notes = self.engine.tick(self._clock())
        for note in notes:
            self._dispatch(note)
        await self._save()
        return notes

    def _dispatch(self, note: Notification) -> None:
        pages = {s for s in self.policy.page_severities}
        for ch in self.channels.get(note.receiver, []):
            if ch.kind == "pagerduty" and not any(a.severity in pages for a in note.alerts):
                continue  # this environment does not page for these severities
            ch.enqueue(note)

    async def _save(self) -> None:
        if self._store.kind == "memory":
            self._nflog.dirty.clear()
            self._nflog.acks_dirty = False
            return
        dirty = {k: self._nflog.entries[k] for k in self._nflog.dirty if k in self._nflog.entries}
        acks = set(self._nflog.acknowledged) if self._nflog.acks_dirty else None
        if not dirty and acks is None:
            return
        try:
            await self._store.save(dirty, acks)
        except _STORE_ERRORS as e:  # keep it dirty; retried at the next step
            log.warning("alerting state: could not save to Redis (%s)", e)
            return
        self._nflog.dirty.difference_update(dirty)
        if acks is not None:
            self._nflog.acks_dirty = False

    # -- operator actions -------------------------------------------------------------------
    def acknowledge(self, fp: str) -> bool:
        """Stop repeats of a firing alert (escalation ends); False if no such alert."""
        ok = self.engine.acknowledge(fp)
        self._wake.set()
        return ok

    def silence(
        self, matchers: list[str], *, duration_s: float, comment: str = "", created_by: str = ""
    ) -> str:
        """Silence alerts matching ``matchers`` from now for ``duration_s``; returns the id."""
        now = self._clock()
        return self.engine.silences.add(
            matchers,
            starts_at=now,
            ends_at=now + duration_s,
            comment=comment,
            created_by=created_by,
        )

    def expire_silence(self, silence_id: str) -> None:
        self.engine.silences.expire(silence_id, self._clock())

    # -- status and tests -------------------------------------------------------------------
    def failing_channels(self) -> frozenset[str]:
        """Channels whose last delivery failed (feed to ``MetricsSnapshot.failing_channels``)."""
        return frozenset(
            ch.name for ch in self._all_channels() if ch.stats.consecutive_failures > 0
        )

    def status(self) -> dict[str, Any]:
        now = self._clock()
        return {
            "environment": self.config.environment,
            "persistence": self.persistence,
            "alerts": len(self.engine.alerts()),
            "firing": sum(1 for a in self.engine.alerts() if not a.resolved_at(now)),
            "groups": self.engine.groups(),
            "rejected": self.rejected,
            "silences": [s.id for s in self.engine.silences.active(now)],
            "channels": {
                ch.name: {
                    "delivered": ch.stats.delivered,
                    "failed": ch.stats.failed,
                    "dropped": ch.stats.dropped,
                    "retries": ch.stats.retries,
                    "pending": ch.pending,
                }
                for ch in self._all_channels()
            },
        }

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until every channel queue is empty; False on timeout."""
        done = await asyncio.gather(*(ch.drain(timeout) for ch in self._all_channels()))
        return all(done)

    async def send_test(
        self, severity: Severity | str, *, timeout: float = 30.0
    ) -> list[DeliveryResult]:
        """Send a test notification through the configured route now; return each channel's
        answer."""
        sev = parse_severity(severity)
        now = self._clock()
        alert = self._apply_policy(
            Alert.create(
                "TimeshareTestAlert",
                sev,
                self.config.environment,
                starts_at=now,
                annotations={
                    "summary": f"test notification ({sev.value}, {self.config.environment})"
                },
            )
        )
        self._test_results.clear()
        for route in self.engine.route.match(alert.labels):
            self._dispatch(
                Notification(
                    route.opts.receiver,
                    f"{route.key}:test",
                    route.opts.group_labels(alert.labels),
                    (alert,),
                    now,
                    test=True,
                )
            )
        await self.drain(timeout)
        return list(self._test_results)

    def _on_result(self, result: DeliveryResult, note: Notification) -> None:
        if result.test:
            self._test_results.append(result)
        if self._telemetry is not None:
            self._telemetry.record_alert_sent(
                receiver=result.receiver,
                channel=result.kind,
                severity=note.severity.value,
                outcome="ok" if result.ok else "failed",
            )

    def _on_drop(self, channel: str) -> None:
        if self._telemetry is not None:
            self._telemetry.record_alert_dropped(channel=channel)

    def _all_channels(self) -> list[Channel]:
        return [ch for chs in self.channels.values() for ch in chs]


async def _close_quietly(store: Any) -> None:
    try:
        await store.close()
    except Exception as e:  # noqa: BLE001 - closing a broken connection may fail; nothing to do
        log.debug("closing the alerting state store failed: %s", e)
