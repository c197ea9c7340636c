"""Notification log: what each (group, receiver) was last told, and the dedup decision.

Mirrors Alertmanager's nflog + DedupStage.needsUpdate. Entries also record acknowledged
fingerprints (our escalation: acknowledged firing alerts don't repeat).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class NflogEntry:
    """The last notification of one (group key, receiver)."""

    at: float
    firing: frozenset[str]
    resolved: frozenset[str]

    def to_dict(self) -> dict:
        return {"at": self.at, "firing": sorted(self.firing), "resolved": sorted(self.resolved)}

    @classmethod
    def from_dict(cls, d: dict) -> NflogEntry:
        return cls(float(d["at"]), frozenset(d.get("firing", ())), frozenset(d.get("resolved", ())))


def needs_update(
    entry: NflogEntry | None,
    firing: frozenset[str],
    resolved: frozenset[str],
    *,
    send_resolved: bool,
    repeat_interval: float,
    now: float,
    acknowledged: frozenset[str] = frozenset(),
) -> bool:
    """Alertmanager's rule for whether a flush notifies the receiver."""
    if entry is None:
        return bool(firing)  # never told: notify unless it is all resolved already
    if not firing <= entry.firing:
        return True  # something new is firing
    if not firing:
        # All resolved: notify (regardless of send_resolved, to clear the log) only if the
        # receiver had been told something was firing.
        return bool(entry.firing)
    if send_resolved and not resolved <= entry.resolved:
        return True
    if not (firing - acknowledged):
        return False  # escalation stops once every firing alert is acknowledged
    # Unchanged: repeat once repeat_interval has passed (>=, so a fake clock hits it exactly).
    return now - entry.at >= repeat_interval


@dataclass(slots=True)
class NotificationLog:
    """In-memory log with dirty tracking so a store can persist what changed.

    Bounded by the number of live groups times receivers; entries of deleted groups are dropped
    after ``retention`` seconds by :meth:`gc`.
    """

    retention: float = 5 * 86400.0
    entries: dict[tuple[str, str], NflogEntry] = field(default_factory=dict)
    acknowledged: set[str] = field(default_factory=set)
    dirty: set[tuple[str, str]] = field(default_factory=set)
    acks_dirty: bool = False

    def get(self, group_key: str, receiver: str) -> NflogEntry | None:
        return self.entries.get((group_key, receiver))

    def set(self, group_key: str, receiver: str, entry: NflogEntry) -> None:
        self.entries[(group_key, receiver)] = entry
        self.dirty.add((group_key, receiver))

    def acknowledge(self, fp: str) -> None:
        self.acknowledged.add(fp)
        self.acks_dirty = True

    def unacknowledge(self, fp: str) -> None:
        if fp in self.acknowledged:
            self.acknowledged.discard(fp)
            self.acks_dirty = True

    def gc(self, now: float) -> None:
        old = [k for k, e in self.entries.items() if now - e.at > self.retention]
        for k in old:
            del self.entries[k]
