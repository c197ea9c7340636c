"""Notification engine with Alertmanager semantics, driven by an explicit clock.

``put(alert, now)`` routes an alert into aggregation groups; ``tick(now)`` flushes the groups
that are due and returns the notifications to deliver. Timing follows Alertmanager:

- a new group waits ``group_wait`` before its first notification (at once if the alert
  started more than ``group_wait`` ago and the group never flushed);
- afterwards the group is re-evaluated every ``group_interval``: new firing alerts notify,
  resolved ones notify when the receiver has ``send_resolved``, an unchanged group repeats once
  ``repeat_interval`` has passed since the last notification;
- silenced or inhibited alerts are left out at flush time;
- resolved alerts leave the group once flushed; an empty group is deleted.

No I/O and no awaits: the caller (``Alerter``) delivers what ``tick`` returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from alerting._private.inhibit import InhibitRule, inhibited
from alerting._private.nflog import NflogEntry, NotificationLog, needs_update
from alerting._private.routing import Route, build_route_tree
from alerting.config import AlertingConfig
from alerting.events import Alert
from alerting.notification import Notification
from alerting.silences import Silences

__all__ = ["EngineFull", "NotificationEngine"]


class EngineFull(RuntimeError):
    """Raised by :meth:`NotificationEngine.put` when the alert bound is reached."""


@dataclass(slots=True)
class _Group:
    key: str
    route: Route
    labels: dict[str, str]
    next_flush: float
    alerts: dict[str, Alert] = field(default_factory=dict)
    has_flushed: bool = False


def _merge(old: Alert | None, new: Alert, now: float) -> Alert:
    """Same fingerprint again: keep the original start while it keeps firing."""
    if old is None or old.resolved_at(now):
        return new
    if new.starts_at > old.starts_at:
        return replace(new, starts_at=old.starts_at)
    return new


class NotificationEngine:
    """Routing, grouping, timing, dedup, inhibition and silences. See the module docstring.

    Bounds: at most ``max_alerts`` distinct alerts are held (further new ones raise
    :class:`EngineFull`; updates of known alerts are always accepted).
    """

    def __init__(
        self,
        route: Route,
        *,
        send_resolved: Mapping[str, bool],
        inhibit_rules: Iterable[InhibitRule] = (),
        silences: Silences | None = None,
        nflog: NotificationLog | None = None,
        max_alerts: int = 10_000,
    ) -> None:
        self._route = route
        self._send_resolved = dict(send_resolved)
        self._rules = tuple(inhibit_rules)
        self.silences = silences or Silences()
        self.nflog = nflog or NotificationLog()
        self._max_alerts = max_alerts
        self._alerts: dict[str, Alert] = {}
        self._groups: dict[str, _Group] = {}

    @classmethod
    def from_config(
        cls,
        config: AlertingConfig,
        *,
        nflog: NotificationLog | None = None,
        max_alerts: int = 10_000,
    ) -> NotificationEngine:
        """Engine for ``config``'s route tree, receivers and inhibition rules."""
        return cls(
            build_route_tree(config.route),
            send_resolved={r.name: r.send_resolved for r in config.receivers},
            inhibit_rules=[InhibitRule.from_config(r) for r in config.inhibit_rules],
            nflog=nflog or NotificationLog(retention=config.state_retention),
            max_alerts=max_alerts,
        )

    @property
    def route(self) -> Route:
        return self._route

    def put(self, alert: Alert, now: float) -> list[str]:
        """Add or update ``alert``; returns the group keys it joined."""
        fp = alert.fingerprint
        if fp not in self._alerts and len(self._alerts) >= self._max_alerts:
            raise EngineFull(f"alert store full ({self._max_alerts} alerts); dropping {alert.name}")
        merged = _merge(self._alerts.get(fp), alert, now)
        self._alerts[fp] = merged
        if merged.resolved_at(now):
            self.nflog.unacknowledge(fp)
        keys = []
        for route in self._route.match(merged.labels):
            glabels = route.opts.group_labels(merged.labels)
            key = f"{route.key}:{{{','.join(f'{k}={v!r}' for k, v in sorted(glabels.items()))}}}"
            group = self._groups.get(key)
            if group is None:
                group = _Group(key, route, glabels, now + route.opts.group_wait)
                self._groups[key] = group
            group.alerts[fp] = _merge(group.alerts.get(fp), merged, now)
            if not group.has_flushed and merged.starts_at + route.opts.group_wait < now:
                group.next_flush = min(group.next_flush, now)  # waited long enough already
            keys.append(key)
        return keys

    def next_due(self) -> float | None:
        """Earliest time a group is due, or None when there are no groups."""
        return min((g.next_flush for g in self._groups.values()), default=None)

    def tick(self, now: float) -> list[Notification]:
        """Flush every due group; return the notifications to deliver, in group-key order."""
        out: list[Notification] = []
        for key in sorted(k for k, g in self._groups.items() if g.next_flush <= now):
            note = self._flush(self._groups[key], now)
            if note is not None:
                out.append(note)
        self._prune(now)
        return out

    def acknowledge(self, fp: str) -> bool:
        """Stop repeats for a firing alert; returns False when no such alert fires."""
        a = self._alerts.get(fp)
        if a is None:
            return False
        self.nflog.acknowledge(fp)
        return True

    def alerts(self) -> list[Alert]:
        """Every alert currently held (firing and not-yet-flushed resolved)."""
        return list(self._alerts.values())

    def groups(self) -> dict[str, list[str]]:
        """Group key -> fingerprints, for status pages and tests."""
        return {k: sorted(g.alerts) for k, g in self._groups.items()}

    def is_muted(self, alert: Alert, now: float) -> bool:
        """Silenced or inhibited at ``now``."""
        if self.silences.is_silenced(alert.labels, now):
            return True
        firing = (a for a in self._alerts.values() if not a.resolved_at(now))
        return inhibited(alert, firing, self._rules)

    def _flush(self, group: _Group, now: float) -> Notification | None:
        opts = group.route.opts
        snapshot = list(group.alerts.values())
        active = [a for a in snapshot if not self.is_muted(a, now)]
        firing = frozenset(a.fingerprint for a in active if not a.resolved_at(now))
        resolved = frozenset(a.fingerprint for a in active if a.resolved_at(now))
        send_resolved = self._send_resolved.get(opts.receiver, True)
        entry = self.nflog.get(group.key, opts.receiver)
        note = None
        if needs_update(
            entry,
            firing,
            resolved,
            send_resolved=send_resolved,
            repeat_interval=opts.repeat_interval,
            now=now,
            acknowledged=frozenset(self.nflog.acknowledged),
        ):
            sent = active if send_resolved else [a for a in active if a.fingerprint in firing]
            if sent:
                sent.sort(key=lambda a: (a.starts_at, a.fingerprint))
                note = Notification(opts.receiver, group.key, dict(group.labels), tuple(sent), now)
            self.nflog.set(group.key, opts.receiver, NflogEntry(now, firing, resolved))
        # Resolved alerts leave the group once flushed (muted ones too: nobody needs them).
        for a in snapshot:
            if a.resolved_at(now):
                del group.alerts[a.fingerprint]
        group.has_flushed = True
        group.next_flush = now + opts.group_interval
        if not group.alerts:
            del self._groups[group.key]
        return note

    def _prune(self, now: float) -> None:
        live = {fp for g in self._groups.values() for fp in g.alerts}
        for fp in [fp for fp, a in self._alerts.items() if fp not in live and a.resolved_at(now)]:
            del self._alerts[fp]
            self.nflog.unacknowledge(fp)
        self.nflog.gc(now)
        self.silences.gc(now)
