"""What a model repository may make the server execute: the operator's trust settings.

The model repository is a trust boundary. A model config names Python code in two places, the
safetensors ``architecture`` factory and rule ``callable``s, and importing a module runs its
top-level code; so both resolve only inside an operator-set module allowlist that lives in the
app settings (``trust.allowed_modules``), never in the repository itself. The check looks at the
name before anything is imported: a refused path executes nothing.

TorchScript archives are programs: TorchScript can call ``torch.from_file`` / ``torch.save`` and
so read or write files with the server's rights. ``trust.allow_torchscript: false`` refuses them;
safetensors weights (tensors only) plus an allowlisted factory are the recommended format.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["DEMO_MODULES", "ModuleAllowlist", "TrustSettings", "check_import_path",
           "config_import_paths", "resolve_callable"]

# The demo repository's factories (deploy/demo.py); an operator adds their own packages.
DEMO_MODULES = ("deploy.demo_models",)


class ModuleAllowlist:
    """Module names (and their submodules) that may be imported for a model config.

    ``ModuleAllowlist(("mypkg.models",))`` allows ``mypkg.models`` and ``mypkg.models.mlp``, not
    ``mypkg`` or ``mypkg.modelsx``. The empty allowlist allows nothing.
    """

    __slots__ = ("modules",)

    def __init__(self, modules: Iterable[str] = ()) -> None:
        self.modules: tuple[str, ...] = tuple(modules)

    def allows(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.modules)

    def __repr__(self) -> str:
        return f"ModuleAllowlist({list(self.modules)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ModuleAllowlist) and other.modules == self.modules

    def __hash__(self) -> int:
        return hash(self.modules)


class TrustSettings(BaseModel):
    """The operator's trust settings (``trust:`` in the app args or environment overlay)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    allowed_modules: tuple[str, ...] = Field(
        DEMO_MODULES, description="Modules whose callables a model config may name as "
        "'architecture' or rule 'callable' (submodules included). Set by the operator only.")
    allow_torchscript: bool = Field(
        True, description="Load TorchScript model.pt files. TorchScript code can read and write "
        "files with the server's rights; false limits the repository to safetensors + an "
        "allowlisted factory (recommended when the repository's writers are not fully trusted).")

    allow_aoti: bool = Field(
        False, description="Load AOTInductor packages (format torch_export, a .pt2 holding a "
        "compiled shared library: native code runs with the server's rights). Plain "
        "torch.export programs need no such permission.")

    @field_validator("allowed_modules")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = [m for m in v if not m or not all(p.isidentifier() for p in m.split("."))]
        if bad:
            raise ValueError(f"allowed_modules: expected dotted module names, got {bad}")
        return v

    @property
    def allowlist(self) -> ModuleAllowlist:
        return ModuleAllowlist(self.allowed_modules)


def check_import_path(path: str, *, allow: ModuleAllowlist, what: str) -> tuple[str, str]:
    """Split ``'module:attr'`` and check the module against ``allow`` without importing it."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what} must look like 'package.module:function', got {path!r}")
    if not allow.allows(module_name):
        raise ValueError(
            f"{what} {path!r}: module {module_name!r} is not in the operator's allowlist "
            f"(app setting trust.allowed_modules: {list(allow.modules)}); nothing was imported")
    return module_name, attr


def resolve_callable(path: str, *, allow: ModuleAllowlist, what: str = "callable"
                     ) -> Callable[..., Any]:
    """Import ``'package.module:attr'`` (dotted attrs allowed) if ``allow`` permits the module.

    Raises ``ValueError`` naming ``what`` and the reason; refuses before importing anything.
    """
    module_name, attr = check_import_path(path, allow=allow, what=what)
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{what} {path!r}: cannot import {module_name!r} ({e})") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"{what} {path!r}: module {module_name!r} has no {attr!r}")
    if not callable(obj):
        raise ValueError(f"{what} {path!r} is not callable")
    return obj


def config_import_paths(raw_fallback: Iterable[Any], architecture: str | None
                        ) -> list[tuple[str, str]]:
    """(field, import path) of every callable a model config names, for checking at load."""
    out: list[tuple[str, str]] = []
    if architecture:
        out.append(("architecture", architecture))
    for i, step in enumerate(raw_fallback):
        if getattr(step, "callable", None):
            out.append((f"fallback[{i}].callable", step.callable))
        for j, rule in enumerate(getattr(step, "rules", None) or ()):
            if isinstance(rule, dict) and rule.get("type") == "callable":
                out.append((f"fallback[{i}].rules[{j}].function", str(rule.get("function"))))
    return out
