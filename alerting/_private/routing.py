"""The routing tree (Alertmanager ``route``): matching with ``continue`` and inherited options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from alerting.config import RouteConfig
from alerting.matchers import Matcher, matches_all, parse_matchers

# Alertmanager's defaults.
DEFAULT_GROUP_WAIT = 30.0
DEFAULT_GROUP_INTERVAL = 300.0
DEFAULT_REPEAT_INTERVAL = 4 * 3600.0


@dataclass(frozen=True, slots=True)
class RouteOpts:
    """Options a route applies to its groups (after inheritance)."""

    receiver: str
    group_by: tuple[str, ...]
    group_by_all: bool
    group_wait: float
    group_interval: float
    repeat_interval: float

    def group_labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        if self.group_by_all:
            return dict(labels)
        return {k: labels[k] for k in self.group_by if k in labels}


@dataclass(frozen=True, slots=True)
class Route:
    """One node: a stable ``key`` (used in group keys), matchers, options and children."""

    key: str
    matchers: tuple[Matcher, ...]
    opts: RouteOpts
    continue_: bool
    children: tuple[Route, ...]

    def match(self, labels: Mapping[str, str]) -> list[Route]:
        """Routes that take an alert with ``labels``: deepest matches, siblings per ``continue``."""
        if not matches_all(self.matchers, labels):
            return []
        found: list[Route] = []
        for child in self.children:
            hits = child.match(labels)
            found.extend(hits)
            if hits and not child.continue_:
                break
        return found or [self]


def build_route_tree(cfg: RouteConfig) -> Route:
    """Resolve inheritance and build the immutable tree from config."""
    return _build(cfg, None, "{}")


def _build(cfg: RouteConfig, parent: RouteOpts | None, key: str) -> Route:
    group_by = (
        cfg.group_by if cfg.group_by is not None else (list(parent.group_by) if parent else [])
    )
    by_all = (
        "..." in group_by
        if cfg.group_by is not None
        else (parent.group_by_all if parent else False)
    )
    opts = RouteOpts(
        receiver=cfg.receiver or (parent.receiver if parent else ""),
        group_by=tuple(sorted(g for g in group_by if g != "...")),
        group_by_all=by_all,
        group_wait=_pick(cfg.group_wait, parent.group_wait if parent else None, DEFAULT_GROUP_WAIT),
        group_interval=_pick(
            cfg.group_interval, parent.group_interval if parent else None, DEFAULT_GROUP_INTERVAL
        ),
        repeat_interval=_pick(
            cfg.repeat_interval, parent.repeat_interval if parent else None, DEFAULT_REPEAT_INTERVAL
        ),
    )
    matchers = parse_matchers(cfg.matchers)
    children = tuple(
        _build(child, opts, f"{key}/{{{','.join(child.matchers)}}}/{i}")
        for i, child in enumerate(cfg.routes)
    )
    return Route(key, matchers, opts, cfg.continue_, children)


def _pick(own: float | None, inherited: float | None, default: float) -> float:
    if own is not None:
        return own
    return inherited if inherited is not None else default
