"""What the pool and the fallback chain share, beneath both (neither imports the other).

:class:`FallbackStep` is one step of a model's fallback chain as its config declares it: the
pool's model repository reads and validates it (``pool.config.ModelConfig.fallback``), the chain
compiles it (``fallbacks.steps.compile_chain``). :class:`RequestExpired` is the pool's refusal
of work whose deadline it cannot meet: the pool raises it, the chain treats it as load (no
breaker fault) and goes on to the next step. :class:`DeadlineTooShort`, a kind of it, says the
deadline itself was the cause: the request's own work would miss it on an idle device, so the
chain answers 504 (the caller's deadline) rather than 503 (the pool's load).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["DeadlineTooShort", "FallbackStep", "RequestExpired"]


class FallbackStep(BaseModel):
    """One step of a fallback chain, tried in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["model", "cpu", "rules", "default"] = Field(..., description="Step kind.")
    model: str | None = Field(None, description="For kind=model: the model to call.")
    version: str | None = Field(None, description="For kind=model: a pinned version.")
    rules: list[dict[str, Any]] | None = Field(None, description="For kind=rules: rule list.")
    callable: str | None = Field(None, description="For kind=rules: 'module:function' instead.")
    outputs: dict[str, Any] | None = Field(None, description="For kind=default: static outputs.")

    @model_validator(mode="after")
    def _check(self) -> FallbackStep:
        if self.kind == "model" and not self.model:
            raise ValueError("fallback step kind=model needs 'model'")
        if self.kind == "default" and self.outputs is None:
            raise ValueError("fallback step kind=default needs 'outputs'")
        if self.kind == "rules" and not (self.rules or self.callable):
            raise ValueError("fallback step kind=rules needs 'rules' or 'callable'")
        return self


class RequestExpired(Exception):
    """The request's deadline passed before it could run; it was not run (fallback path)."""


class DeadlineTooShort(RequestExpired):
    """Not run because its deadline is shorter than its own estimated work: it would miss on an
    idle device too, so no amount of waiting or retrying at this deadline helps (not load)."""
