"""Silences: mute alerts matching a set of matchers for a time range (Alertmanager semantics)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from alerting.matchers import Matcher, matches_all, parse_matcher

__all__ = ["Silence", "Silences"]


@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes alerts matching all ``matchers`` while ``starts_at <= now < ends_at``."""

    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    created_by: str = ""
    comment: str = ""

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def mutes(self, labels: Mapping[str, str], now: float) -> bool:
        return self.active(now) and matches_all(self.matchers, labels)


class Silences:
    """The set of silences. Bounded: at most ``max_silences``; expired ones are dropped first."""

    def __init__(self, *, max_silences: int = 1000, retention: float = 86400.0) -> None:
        self._by_id: dict[str, Silence] = {}
        self._ids = itertools.count(1)
        self._max = max_silences
        self._retention = retention

    def add(
        self,
        matchers: Iterable[Matcher | str],
        *,
        starts_at: float,
        ends_at: float,
        created_by: str = "",
        comment: str = "",
    ) -> str:
        """Create a silence and return its id. At least one matcher is required."""
        parsed = tuple(m if isinstance(m, Matcher) else parse_matcher(m) for m in matchers)
        if not parsed:
            raise ValueError("a silence needs at least one matcher")
        if ends_at <= starts_at:
            raise ValueError(f"silence ends_at ({ends_at}) must be after starts_at ({starts_at})")
        self.gc(starts_at)
        if len(self._by_id) >= self._max:
            raise ValueError(f"too many silences (max {self._max}); expire some first")
        sid = f"s{next(self._ids)}"
        self._by_id[sid] = Silence(sid, parsed, starts_at, ends_at, created_by, comment)
        return sid

    def expire(self, silence_id: str, now: float) -> None:
        """End a silence now. Unknown ids raise KeyError naming the id."""
        s = self._by_id.get(silence_id)
        if s is None:
            raise KeyError(f"no silence {silence_id!r}")
        if s.ends_at > now:
            self._by_id[silence_id] = replace(s, ends_at=max(now, s.starts_at))

    def get(self, silence_id: str) -> Silence:
        return self._by_id[silence_id]

    def silenced_by(self, labels: Mapping[str, str], now: float) -> list[str]:
        """Ids of the active silences muting ``labels``."""
        return [s.id for s in self._by_id.values() if s.mutes(labels, now)]

    def is_silenced(self, labels: Mapping[str, str], now: float) -> bool:
        return any(s.mutes(labels, now) for s in self._by_id.values())

    def active(self, now: float) -> list[Silence]:
        return [s for s in self._by_id.values() if s.active(now)]

    def gc(self, now: float) -> None:
        """Forget silences that ended more than ``retention`` seconds ago."""
        for sid in [sid for sid, s in self._by_id.items() if now - s.ends_at > self._retention]:
            del self._by_id[sid]
