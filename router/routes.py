"""Route configuration (pydantic at the edge) and building strategies from it.

A route is a virtual model callers name like a model. Routes are declared in YAML::

    routes:
      - name: digits
        strategy: cascade
        cheap: digits-small
        expensive: digits-large
        threshold: 0.93
        confidence: max_softmax
        spill: cpu

``load_routes(source)`` accepts a path, YAML text, a mapping (``{"routes": [...]}`` or
``{"routes": {name: {...}}}``) or a list of route mappings and returns ``{name: RouteConfig}``.
``build_strategy(config)`` returns the ``policies.routing.RouteStrategy`` (loading the predictive
scorer file when the strategy needs one). ``write_threshold(path, route, threshold)`` rewrites
one route's threshold in a routes YAML file (used by ``timeshare routes calibrate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.routing import CONFIDENCE_MEASURES, RouteStrategy, make_strategy, strategy_names
from policies.spill import SpillConfig
from router.route_training import load_scorer

__all__ = ["RouteConfig", "RoutesFileError", "build_strategy", "load_routes", "write_threshold"]

_TWO_MODEL = ("cascade", "predictive", "fast-then-refine")


class RoutesFileError(ValueError):
    """A routes file or mapping is malformed; the message names the route and the field."""


class RouteConfig(BaseModel):
    """One route: a virtual model over a cheap and an expensive model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1, description="Route name; callers use it as a model name.")
    strategy: str = Field(..., description=f"One of: {', '.join(strategy_names())}.")
    cheap: str | None = Field(None, description="The cheap model (run first by cascades).")
    expensive: str | None = Field(None, description="The expensive, more accurate model.")
    use: Literal["cheap", "expensive"] | None = Field(
        None, description="static only: which model to always use (default: expensive).")
    threshold: float | None = Field(
        None, ge=0.0, le=1.0,
        description="Escalate iff score < threshold (cascade: cheap confidence; predictive: "
                    "scorer's P(cheap suffices)). Default 0.9 (cascade) / 0.5 (predictive).")
    confidence: Literal["max_softmax", "margin"] = Field(
        "max_softmax", description=f"Cascade confidence measure: {', '.join(CONFIDENCE_MEASURES)}.")
    output: str = Field("logits", min_length=1,
                        description="Output tensor holding the cheap model's logits.")
    spill: Literal["cpu", "cheap", "cpu-then-cheap", "none"] = Field(
        "cpu", description="Where requests go when the GPU pool would miss their deadline: the "
                           "CPU pool, the cheap model, the CPU pool unless it would miss too "
                           "(then the cheap model), or nowhere.")
    spill_high: float = Field(0.8, gt=0, description="Enter spill when wait > deadline x this.")
    spill_low: float = Field(0.5, gt=0, description="Leave spill when wait < deadline x this.")
    predictive_model: str | None = Field(
        None, description="predictive only: path of the scorer (.safetensors).")
    shadow_rate: float = Field(
        0.0, ge=0.0, le=1.0,
        description="Share of requests that also run the other model and log the outcome.")
    outcome_log: str | None = Field(
        None, description="JSON-lines file receiving shadow outcomes (training data).")

    @field_validator("strategy")
    @classmethod
    def _strategy(cls, v: str) -> str:
        if v not in strategy_names():
            raise ValueError(f"unknown route strategy {v!r}; valid: {', '.join(strategy_names())}")
        return v

    @model_validator(mode="after")
    def _check(self) -> RouteConfig:
        if self.strategy in _TWO_MODEL and not (self.cheap and self.expensive):
            raise ValueError(f"strategy {self.strategy!r} needs both 'cheap' and 'expensive' "
                             f"(got cheap={self.cheap!r}, expensive={self.expensive!r})")
        if self.strategy == "static":
            use = self.use or ("expensive" if self.expensive else "cheap")
            if not (self.expensive if use == "expensive" else self.cheap):
                raise ValueError(f"static route: use={use!r} needs the {use!r} model set")
        elif self.use is not None:
            raise ValueError(f"'use' applies to strategy 'static' only, not {self.strategy!r}")
        if self.cheap and self.cheap == self.expensive:
            raise ValueError(f"'cheap' and 'expensive' must differ, both are {self.cheap!r}")
        if self.strategy == "predictive" and not self.predictive_model:
            raise ValueError("strategy 'predictive' needs 'predictive_model' (scorer path; "
                             "train one with `timeshare routes retrain`)")
        if self.spill in ("cheap", "cpu-then-cheap") and not self.cheap:
            raise ValueError(f"spill={self.spill!r} needs a 'cheap' model")
        if not self.spill_low < self.spill_high:
            raise ValueError(f"spill_low ({self.spill_low}) must be < spill_high "
                             f"({self.spill_high})")
        return self

    @property
    def spill_config(self) -> SpillConfig:
        """The hysteresis band for ``policies.spill.decide_spill``."""
        return SpillConfig(high=self.spill_high, low=self.spill_low)

    @property
    def models(self) -> tuple[str, ...]:
        """Models the route may call."""
        return tuple(m for m in (self.cheap, self.expensive) if m)


def build_strategy(config: RouteConfig, *, base_dir: Path | str | None = None) -> RouteStrategy:
    """The strategy for ``config``. Reads the predictive scorer file (relative paths resolve
    against ``base_dir``, e.g. the routes file's folder)."""
    kw: dict[str, Any] = {"cheap": config.cheap, "expensive": config.expensive,
                          "shadow_rate": config.shadow_rate}
    if config.threshold is not None:
        kw["threshold"] = config.threshold
    if config.strategy == "static":
        kw["use"] = config.use
        kw.pop("threshold", None)
    elif config.strategy == "cascade":
        kw["confidence"] = config.confidence
    elif config.strategy == "predictive":
        path = Path(config.predictive_model or "")
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        kw["scorer"] = load_scorer(path)
    return make_strategy(config.strategy, **kw)


def _entries(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, Mapping) and "routes" in data:
        data = data["routes"]
    if data is None:
        return []
    if isinstance(data, Mapping):
        out = []
        for name, body in data.items():
            if not isinstance(body, Mapping):
                raise RoutesFileError(f"routes.{name}: expected a mapping, got "
                                      f"{type(body).__name__}")
            out.append({"name": name, **body})
        return out
    if isinstance(data, list):
        for i, body in enumerate(data):
            if not isinstance(body, Mapping):
                raise RoutesFileError(f"routes[{i}]: expected a mapping, got "
                                      f"{type(body).__name__}")
        return [dict(b) for b in data]
    raise RoutesFileError(f"routes: expected a list or mapping, got {type(data).__name__}")


def load_routes(source: Path | str | Mapping[str, Any] | list[Any]) -> dict[str, RouteConfig]:
    """Parse routes from a YAML path, YAML text, a mapping or a list (see module docstring).

    Raises ``RoutesFileError`` naming the route and field on any problem.
    """
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source
                                    and source.endswith((".yaml", ".yml"))):
        try:
            source = yaml.safe_load(Path(source).read_text())
        except OSError as e:
            raise RoutesFileError(f"routes file {source}: {e.strerror}") from None
    elif isinstance(source, str):
        source = yaml.safe_load(source)
    routes: dict[str, RouteConfig] = {}
    for i, body in enumerate(_entries(source)):
        label = body.get("name", f"#{i}")
        try:
            cfg = RouteConfig(**body)
        except ValidationError as e:
            errs = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'route'}: {err['msg']}"
                for err in e.errors()
            )
            raise RoutesFileError(f"route {label!r}: {errs}") from None
        if cfg.name in routes:
            raise RoutesFileError(f"route {cfg.name!r} is declared twice")
        routes[cfg.name] = cfg
    return routes


def write_threshold(path: Path | str, route: str, threshold: float) -> None:
    """Set one route's ``threshold`` in a routes YAML file (other content is kept; comments
    are not). Validates the result before writing."""
    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    container = data["routes"] if isinstance(data, dict) and "routes" in data else data
    if isinstance(container, dict):
        if route not in container:
            raise RoutesFileError(f"route {route!r} not in {path}; have {sorted(container)}")
        container[route]["threshold"] = round(float(threshold), 6)
    else:
        hits = [r for r in container if isinstance(r, dict) and r.get("name") == route]
        if not hits:
            names = [r.get("name") for r in container if isinstance(r, dict)]
            raise RoutesFileError(f"route {route!r} not in {path}; have {names}")
        hits[0]["threshold"] = round(float(threshold), 6)
    load_routes(data)  # refuse to write an invalid file
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    tmp.replace(path)
