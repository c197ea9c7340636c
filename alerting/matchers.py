"""Label matchers in Alertmanager's syntax: ``name="v"``, ``name!="v"``, ``name=~"re"``,
``name!~"re"``.

Regexes are fully anchored, as in Alertmanager. Quotes around the value are optional.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Matcher", "matches_all", "parse_matcher", "parse_matchers"]

_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")
_OPS = ("=", "!=", "=~", "!~")


@dataclass(frozen=True, slots=True)
class Matcher:
    """One label matcher. A missing label matches as the empty string (Alertmanager rule)."""

    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"matcher operator must be one of {', '.join(_OPS)}, got {self.op!r}")
        if self.op in ("=~", "!~"):
            try:
                re.compile(self.value)
            except re.error as e:
                raise ValueError(f"bad regex in matcher {self}: {e}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        v = labels.get(self.name, "")
        if self.op == "=":
            return v == self.value
        if self.op == "!=":
            return v != self.value
        hit = re.fullmatch(self.value, v) is not None
        return hit if self.op == "=~" else not hit

    def __str__(self) -> str:
        return f'{self.name}{self.op}"{self.value}"'


def parse_matcher(text: str) -> Matcher:
    """``'severity=~"P1|P2"'`` -> ``Matcher("severity", "=~", "P1|P2")``."""
    m = _RE.match(text)
    if not m:
        raise ValueError(
            f'bad matcher {text!r}: expected name="value", name!="value", '
            f'name=~"regex" or name!~"regex"'
        )
    name, op, value = m.groups()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return Matcher(name, op, value)


def parse_matchers(texts: Iterable[str]) -> tuple[Matcher, ...]:
    """Parse each string with :func:`parse_matcher`."""
    return tuple(parse_matcher(t) for t in texts)


def matches_all(matchers: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    """True when every matcher matches (an empty list matches everything)."""
    return all(m.matches(labels) for m in matchers)
