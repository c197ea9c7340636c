"""Declarative fallback rules (pydantic at load; first match wins at run time).

A rule list comes from a model config (``fallback: [{kind: rules, rules: [...]}]``) or YAML::

    - {name: greeting, type: regex, pattern: "^(hi|hello)\\b", ignore_case: true,
       outputs: {label: [0]}}
    - {name: refund, type: keyword, keywords: [refund, "money back"], outputs: {label: [3]}}
    - {name: blank, type: threshold, input: pixels, reduce: max, op: lt, value: 0.01,
       outputs: {label: [-1]}}
    - {name: mid, type: range, input: pixels, reduce: mean, min: 0.2, max: 0.4, outputs: {...}}
    - {name: faq, type: lookup, key: text, table: {"opening hours": {answer: [9]}}}
    - {name: smart, type: callable, function: "mypkg.rules:answer", timeout_ms: 20}
    - {name: fallback, type: static, outputs: {label: [0]}}

Every mistake is reported as :class:`RuleConfigError` naming the rule index, name and field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from common.trust import ModuleAllowlist, resolve_callable
from fallbacks.request import FallbackRequest, as_outputs

__all__ = [
    "CallableRule",
    "KeywordRule",
    "LookupRule",
    "RangeRule",
    "RegexRule",
    "RuleConfigError",
    "RuleSpec",
    "StaticRule",
    "ThresholdRule",
    "load_rules",
]

Outputs = dict[str, np.ndarray]
_OPS: dict[str, Callable[[float, float], bool]] = {
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
}
_OP_ALIASES = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
_REDUCERS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda a: float(np.mean(a)),
    "max": lambda a: float(np.max(a)),
    "min": lambda a: float(np.min(a)),
    "sum": lambda a: float(np.sum(a)),
    "std": lambda a: float(np.std(a)),
    "argmax": lambda a: float(np.argmax(a)),
}
Reduce = Literal["mean", "max", "min", "sum", "std", "argmax"]


class _FieldError(ValueError):
    """A cross-field check failure that knows which field to blame."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class RuleConfigError(ValueError):
    """A rule failed validation: ``index``, ``rule_name`` and ``field`` say where."""

    def __init__(self, message: str, *, index: int, rule_name: str | None, field: str | None):
        super().__init__(message)
        self.index, self.rule_name, self.field = index, rule_name, field


def _allowlist(context: Any) -> ModuleAllowlist:
    """The operator's allowlist passed to :func:`load_rules` (none given: nothing allowed)."""
    allow = context.get("allow") if isinstance(context, dict) else None
    return allow if isinstance(allow, ModuleAllowlist) else ModuleAllowlist()


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str = Field(..., min_length=1, description="Rule name; answers say 'rules:<name>'.")

    def match(self, request: FallbackRequest) -> Outputs | None:
        """The outputs if this rule answers ``request``, else None (declarative rules only)."""
        raise NotImplementedError


class _WithOutputs(_Rule):
    outputs: Any = Field(..., description="Outputs returned on a match: {name: array-like}.")

    @field_validator("outputs")
    @classmethod
    def _outputs(cls, v: Any) -> Outputs:
        return as_outputs(v, where="outputs")


class RegexRule(_WithOutputs):
    """Matches when ``pattern`` is found (``re.search``) in the request text."""

    type: Literal["regex"]
    pattern: str = Field(..., min_length=1, description="Python regular expression.")
    ignore_case: bool = Field(False, description="Case-insensitive match.")
    _re: re.Pattern[str] = PrivateAttr()

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as e:
            raise ValueError(f"invalid regular expression {v!r}: {e}") from None
        return v

    def model_post_init(self, _: Any) -> None:
        self._re = re.compile(self.pattern, re.IGNORECASE if self.ignore_case else 0)

    def match(self, request: FallbackRequest) -> Outputs | None:
        return self.outputs if request.text and self._re.search(request.text) else None


class KeywordRule(_WithOutputs):
    """Matches when any (or all) ``keywords`` occur in the request text."""

    type: Literal["keyword"]
    keywords: tuple[str, ...] = Field(..., min_length=1, description="Words or phrases.")
    match_mode: Literal["any", "all"] = Field("any", alias="match", description="any or all.")
    case_sensitive: bool = Field(False, description="Case-sensitive comparison.")
    whole_word: bool = Field(True, description="Only match whole words (word boundaries).")
    _res: tuple[re.Pattern[str], ...] = PrivateAttr()

    @field_validator("keywords")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not k.strip() for k in v):
            raise ValueError("keywords must be non-empty strings")
        return v

    def model_post_init(self, _: Any) -> None:
        flags = 0 if self.case_sensitive else re.IGNORECASE
        wrap = (lambda k: rf"\b{re.escape(k)}\b") if self.whole_word else re.escape
        self._res = tuple(re.compile(wrap(k), flags) for k in self.keywords)

    def match(self, request: FallbackRequest) -> Outputs | None:
        if not request.text:
            return None
        hits = (r.search(request.text) is not None for r in self._res)
        ok = all(hits) if self.match_mode == "all" else any(hits)
        return self.outputs if ok else None


def _statistic(request: FallbackRequest, name: str, reduce: str | None) -> float | None:
    arr = request.inputs.get(name)
    if arr is None:
        return None
    arr = np.asarray(arr)
    if arr.size == 0 or arr.dtype.kind not in "biuf":
        return None
    if reduce is None:
        return float(arr.reshape(-1)[0]) if arr.size == 1 else None
    return _REDUCERS[reduce](arr)


class ThresholdRule(_WithOutputs):
    """Matches when ``reduce(inputs[input]) <op> value``."""

    type: Literal["threshold"]
    input: str = Field(..., min_length=1, description="Input tensor name.")
    reduce: Reduce = Field("mean", description="Statistic over all elements of the input.")
    op: Literal["lt", "le", "gt", "ge", "eq", "ne"] = Field(..., description="Comparison.")
    value: float = Field(..., description="Threshold.")

    @field_validator("op", mode="before")
    @classmethod
    def _alias(cls, v: Any) -> Any:
        return _OP_ALIASES.get(v, v) if isinstance(v, str) else v

    def match(self, request: FallbackRequest) -> Outputs | None:
        s = _statistic(request, self.input, self.reduce)
        return self.outputs if s is not None and _OPS[self.op](s, self.value) else None


class RangeRule(_WithOutputs):
    """Matches when ``reduce(inputs[input])`` lies within [min, max] (bounds optional)."""

    type: Literal["range"]
    input: str = Field(..., min_length=1, description="Input tensor name.")
    reduce: Reduce = Field("mean", description="Statistic over all elements of the input.")
    min: float | None = Field(None, description="Lower bound.")
    max: float | None = Field(None, description="Upper bound.")
    inclusive: bool = Field(True, description="Bounds are inclusive.")

    @model_validator(mode="after")
    def _bounds(self) -> RangeRule:
        if self.min is None and self.max is None:
            raise _FieldError("min", "range needs 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise _FieldError("min", f"min must be <= max, got min={self.min} max={self.max}")
        return self

    def match(self, request: FallbackRequest) -> Outputs | None:
        s = _statistic(request, self.input, self.reduce)
        if s is None:
            return None
        lo = self.min is None or (s >= self.min if self.inclusive else s > self.min)
        hi = self.max is None or (s <= self.max if self.inclusive else s < self.max)
        return self.outputs if lo and hi else None


class LookupRule(_Rule):
    """Looks a key (the text, or a scalar/statistic of an input) up in ``table``."""

    type: Literal["lookup"]
    key: Literal["text", "input"] = Field("text", description="Where the key comes from.")
    input: str | None = Field(None, description="For key=input: the input tensor name.")
    reduce: Reduce | None = Field(None, description="For key=input: statistic; None = scalar.")
    normalize: bool = Field(True, description="For key=text: strip and lower-case first.")
    table: dict[str, Any] = Field(..., min_length=1, description="key -> outputs.")
    default: Any = Field(None, description="Outputs when the key is missing; None = no match.")

    @field_validator("table")
    @classmethod
    def _table(cls, v: dict[str, Any]) -> dict[str, Outputs]:
        return {str(k): as_outputs(o, where=f"table[{k!r}]") for k, o in v.items()}

    @field_validator("default")
    @classmethod
    def _default(cls, v: Any) -> Outputs | None:
        return None if v is None else as_outputs(v, where="default")

    @model_validator(mode="after")
    def _needs_input(self) -> LookupRule:
        if self.key == "input" and not self.input:
            raise _FieldError("input", "key=input needs 'input' (the input tensor name)")
        return self

    def model_post_init(self, _: Any) -> None:
        if self.key == "text" and self.normalize:
            object.__setattr__(self, "table", {k.strip().lower(): o for k, o in self.table.items()})

    def match(self, request: FallbackRequest) -> Outputs | None:
        if self.key == "text":
            if request.text is None:
                return None
            k = request.text.strip().lower() if self.normalize else request.text
        else:
            s = _statistic(request, self.input or "", self.reduce)
            if s is None:
                return None
            k = str(int(s)) if float(s).is_integer() else str(s)
        return self.table.get(k, self.default)


class StaticRule(_WithOutputs):
    """Always matches (put it last)."""

    type: Literal["static"]

    def match(self, request: FallbackRequest) -> Outputs | None:
        return self.outputs


class CallableRule(_Rule):
    """Calls ``function(request) -> {name: array-like} | None`` with its own timeout.

    Sync functions run in a worker thread; ``async def`` functions are awaited. A timeout, an
    exception or a None/invalid result counts as no answer.
    """

    type: Literal["callable"]
    function: str = Field(..., description="Import path 'package.module:function'.")
    timeout_ms: float = Field(50.0, gt=0, le=60_000, description="Own time limit of a call.")
    _fn: Callable[..., Any] = PrivateAttr()

    @field_validator("function")
    @classmethod
    def _importable(cls, v: str, info: ValidationInfo) -> str:
        resolve_callable(v, allow=_allowlist(info.context), what="function")
        return v

    def model_post_init(self, context: Any) -> None:
        self._fn = resolve_callable(self.function, allow=_allowlist(context), what="function")

    @property
    def fn(self) -> Callable[..., Any]:
        """The imported function."""
        return self._fn


RuleSpec = Annotated[
    RegexRule | KeywordRule | ThresholdRule | RangeRule | LookupRule | StaticRule | CallableRule,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(RuleSpec)
_TAG_ERRORS = {"union_tag_not_found", "union_tag_invalid", "model_attributes_type"}


def load_rules(raw: Sequence[Mapping[str, Any]], *, where: str = "rules",
               allow: ModuleAllowlist = ModuleAllowlist()) -> tuple[Any, ...]:
    """Validate a rule list; raise :class:`RuleConfigError` naming the first bad rule and field.

    ``where`` prefixes messages, e.g. ``"fallback[2].rules"``. ``callable`` rules resolve only
    inside ``allow``, the operator's module allowlist (the default allows nothing).
    """
    rules: list[Any] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) else None
        label = f"{where}[{i}]" + (f" (name={name!r})" if name else "")
        if not isinstance(item, Mapping):
            raise RuleConfigError(
                f"{label}: expected a mapping, got {type(item).__name__}",
                index=i,
                rule_name=None,
                field=None,
            )
        try:
            rule = _ADAPTER.validate_python(dict(item), context={"allow": allow})
        except ValidationError as e:
            err = e.errors()[0]
            loc = [str(p) for p in err["loc"]]
            blamed = (err.get("ctx") or {}).get("error")
            field: str | None
            if err["type"] in _TAG_ERRORS:
                field = "type"
            elif isinstance(blamed, _FieldError):
                field = blamed.field
            else:
                loc = loc[1:] if loc and loc[0] == item.get("type") else loc
                field = ".".join(loc) or None
            msg = err["msg"].removeprefix("Value error, ")
            raise RuleConfigError(
                f"{label}: field '{field}': {msg}", index=i, rule_name=name, field=field
            ) from None
        if rule.name in seen:
            raise RuleConfigError(
                f"{label}: field 'name': duplicate rule name (also rules[{seen[rule.name]}])",
                index=i,
                rule_name=rule.name,
                field="name",
            )
        seen[rule.name] = i
        rules.append(rule)
    return tuple(rules)
