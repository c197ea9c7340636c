"""Fallback steps: the primary's :class:`Target`, a chain compiled once per model config
(:func:`compile_chain`), and which pools its model steps run on (used by ``fallbacks.chain``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from common.fallback_types import FallbackStep
from common.trust import ModuleAllowlist
from fallbacks.request import FallbackRequest, as_outputs
from fallbacks.rule_engine import RuleEngine

__all__ = ["CompiledStep", "PoolName", "Target", "compile_chain", "follows", "step_target"]

PoolName = Literal["gpu", "cpu"]


@dataclass(frozen=True, slots=True)
class Target:
    """The primary call: model, version (None = default) and pool."""

    model: str
    version: str | None = None
    pool: PoolName = "gpu"


@dataclass(frozen=True, slots=True)
class CompiledStep:
    """A validated fallback step ready to run."""

    kind: Literal["model", "cpu", "rules", "default"]
    model: str | None = None
    version: str | None = None
    engine: RuleEngine | None = None
    outputs: Mapping[str, np.ndarray] | None = None

    @property
    def local(self) -> bool:
        """Rules and default steps run in-process and cost (almost) no time."""
        return self.kind in ("rules", "default")


def compile_chain(
    steps: Sequence[FallbackStep], *, callable_timeout_ms: float = 50.0, where: str = "fallback",
    allow: ModuleAllowlist = ModuleAllowlist(),
) -> tuple[CompiledStep, ...]:
    """Validate a model's fallback chain (rules, static outputs) once, at config load.

    Rule callables resolve only inside ``allow``, the operator's module allowlist.

    Raises ``RuleConfigError`` / ``ValueError`` naming e.g. ``fallback[2].rules[0]``.
    """
    out: list[CompiledStep] = []
    for i, s in enumerate(steps):
        if s.kind == "rules":
            engine = RuleEngine.from_config(
                s.rules,
                callable_path=s.callable,
                callable_timeout_ms=callable_timeout_ms,
                where=f"{where}[{i}].rules",
                allow=allow,
            )
            out.append(CompiledStep("rules", engine=engine))
        elif s.kind == "default":
            out.append(
                CompiledStep(
                    "default", outputs=as_outputs(s.outputs, where=f"{where}[{i}].outputs")
                )
            )
        else:
            out.append(CompiledStep(s.kind, model=s.model, version=s.version))
    return tuple(out)


def follows(steps: Sequence[CompiledStep], local_only: bool) -> tuple[bool, bool]:
    """Whether a local (rules, default) and whether a remote step is among ``steps`` (remote
    steps do not count when ``local_only``)."""
    local = remote = False
    for s in steps:
        if s.local:
            local = True
        elif not local_only:
            remote = True
    return local, remote


def step_target(step: CompiledStep, primary: Target | None, request: FallbackRequest,
                 default_pool: PoolName) -> Target:
    """A model/cpu step's target; a cpu step without a model runs the primary model on CPU."""
    pool: PoolName = "cpu" if step.kind == "cpu" else default_pool
    if step.model:
        return Target(step.model, step.version, pool)
    base = primary or Target(request.model, request.version)
    return Target(base.model, step.version or base.version, pool)
