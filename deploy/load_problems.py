"""The refused and failed models and versions in a ``/v2/status`` body, for the operator views.

Each pool replica reports, per model, its config's problem and each version's state
(``pool.host``); ``timeshare status`` and ``status --watch`` list them with the reason, the file
and the field, once per problem even when several pools report it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

__all__ = ["LoadProblem", "load_problems"]

PROBLEM_STATES = ("failed", "refused")  # as pool.host says; not imported: the CLI stays light


@dataclass(frozen=True, slots=True)
class LoadProblem:
    """A model config (``version`` None) or version that failed or was refused."""

    model: str
    version: str | None
    state: str  # "failed" | "refused"
    reason: str  # "<file> [<field>]: <why>"
    file: str | None
    field: str | None
    pools: tuple[str, ...]

    def describe(self) -> str:
        what = "config" if self.version is None else f"version {self.version}"
        return f"{self.model} {what} {self.state}: {self.reason}"


def load_problems(status: dict[str, Any]) -> list[LoadProblem]:
    """Every failed or refused config and version in ``status``, sorted by model."""
    found: dict[LoadProblem, list[str]] = {}  # without its pools -> the pools reporting it
    for pool, info in (status.get("pools") or {}).items():
        for name, m in (info.get("models") or {}).items() if isinstance(info, dict) else ():
            views = [(None, m.get("problem"))] + list((m.get("versions") or {}).items())
            for version, v in views:
                if isinstance(v, dict) and v.get("state") in PROBLEM_STATES:
                    p = LoadProblem(name, version, v["state"], v.get("reason") or "",
                                    v.get("file"), v.get("field"), ())
                    found.setdefault(p, []).append(pool)
    return [replace(p, pools=tuple(pools))
            for p, pools in sorted(found.items(), key=lambda kv: (kv[0].model,
                                                                   kv[0].version or ""))]
