"""Load-test configuration schema (the YAML file given to ``timeshare loadtest``).

Pydantic at the edge: unknown keys are errors naming the key, every field has a description and
cross-field checks echo the bad values. Example (see ``deploy/loadtest/demo.yaml``)::

    target: {url: "http://127.0.0.1:8000"}
    models:
      - {name: digits-small, weight: 3}
      - {name: digits-large, weight: 1}
    inputs:
      - {name: pixels, datatype: FP32, shape: [1, 64], random: {low: 0, high: 16}}
    arrival: {process: poisson, rate: 20, seed: 1}
    duration_s: 20
    warmup_s: 3
    slo: {p99_ms: 500}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from policies.priority import parse_priority
from pool.config import DTYPES

__all__ = [
    "ArrivalConfig",
    "InputSource",
    "LoadTestConfig",
    "ModelMix",
    "RandomRange",
    "SloConfig",
    "StabilityConfig",
    "TargetConfig",
    "load_config",
]

_STRICT = ConfigDict(extra="forbid", frozen=True)


class TargetConfig(BaseModel):
    """Where requests go: an HTTP base URL speaking KServe v2 JSON, the gRPC address of the Open
    Inference Protocol's ``ModelInfer``, or a Ray Serve app's handle."""

    model_config = _STRICT

    url: str | None = Field(
        None, description="Base URL, e.g. http://127.0.0.1:8000 (no trailing path)."
    )
    app: str | None = Field(
        None, description="Ray Serve application name (e.g. timeshare): requests go through "
        "serve.get_app_handle(app).infer, as another Ray app would call it."
    )
    grpc: str | None = Field(
        None, description="host:port of inference.GRPCInferenceService (Timeshare's grpc.port, "
        "e.g. 127.0.0.1:8101): requests go as ModelInfer calls with raw tensors, as "
        "tritonclient.grpc sends them, from this process."
    )
    timeout_s: float = Field(
        30.0, gt=0, description="A request not answered this long after its planned send time "
        "is a Timeout error (also when still queued or in flight at the end of the run)."
    )
    max_connections: int = Field(
        256, ge=1, le=10_000,
        description="Connections (handle: concurrent calls), pre-opened and shared among the "
        "generator processes; a request waiting for one counts that wait as latency because "
        "latency is measured from the planned send time."
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not v.startswith("http://"):
            raise ValueError(f"target.url must start with http:// (the generator speaks plain "
                             f"HTTP/1.1), got {v!r}")
        return v.rstrip("/")

    @field_validator("grpc")
    @classmethod
    def _grpc(cls, v: str | None) -> str | None:
        if v is None:
            return None
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or "/" in v:
            raise ValueError(f"target.grpc must be host:port (no scheme), got {v!r}")
        return v

    @model_validator(mode="after")
    def _one_target(self) -> TargetConfig:
        if sum(t is not None for t in (self.url, self.app, self.grpc)) != 1:
            raise ValueError(f"target: give exactly one of url, grpc or app, got "
                             f"url={self.url!r} grpc={self.grpc!r} app={self.app!r}")
        return self

    @property
    def described(self) -> str:
        """The target as a report names it."""
        return self.url or (f"grpc://{self.grpc}" if self.grpc else f"app {self.app}")


class RandomRange(BaseModel):
    """Uniform random values in [low, high) (integers: [low, high))."""

    model_config = _STRICT

    low: float = Field(0.0, description="Lowest value.")
    high: float = Field(1.0, description="Upper bound (exclusive).")

    @model_validator(mode="after")
    def _order(self) -> RandomRange:
        if not self.high > self.low:
            raise ValueError(
                f"random.high must exceed random.low, got low={self.low} high={self.high}"
            )
        return self


class InputSource(BaseModel):
    """One input tensor: example data from a file, or random values of a shape and datatype."""

    model_config = _STRICT

    name: str = Field(..., min_length=1, description="Input tensor name as the model expects it.")
    datatype: str = Field("FP32", description=f"Wire datatype, one of {', '.join(DTYPES)}.")
    shape: tuple[int, ...] | None = Field(
        None, description="Full tensor shape sent on the wire (batch dim included), e.g. [1, 64]. "
        "Required for random data; for file data each example is reshaped to it when given."
    )
    file: Path | None = Field(
        None, description=".npy (examples along axis 0) or .json (a list of examples) file."
    )
    random: RandomRange | None = Field(None, description="Random uniform values (when no file).")

    @field_validator("datatype", mode="before")
    @classmethod
    def _dtype(cls, v: Any) -> str:
        s = str(v).upper()
        if s not in DTYPES:
            raise ValueError(f"datatype must be one of {', '.join(DTYPES)}, got {v!r}")
        return s

    @model_validator(mode="after")
    def _source(self) -> InputSource:
        if self.file is not None and self.random is not None:
            raise ValueError(f"input {self.name!r}: give either file or random, not both")
        if self.file is None and self.shape is None:
            raise ValueError(f"input {self.name!r}: shape is required for random data")
        if self.file is not None and self.file.suffix not in (".npy", ".json"):
            raise ValueError(
                f"input {self.name!r}: file must be .npy or .json, got {str(self.file)!r}"
            )
        if self.shape is not None and any(d <= 0 for d in self.shape):
            raise ValueError(
                f"input {self.name!r}: shape dims must be positive, got {list(self.shape)}"
            )
        return self


class ModelMix(BaseModel):
    """One model or route in the traffic mix."""

    model_config = _STRICT

    name: str = Field(..., min_length=1, description="Model or route name.")
    weight: float = Field(1.0, gt=0, description="Relative share of requests.")
    version: str | None = Field(None, description="Model version; server default when omitted.")
    inputs: list[InputSource] | None = Field(
        None, description="Inputs of this model; the top-level `inputs` when omitted."
    )


class ArrivalConfig(BaseModel):
    """Arrival process: constant spacing or Poisson, at one rate or a sweep of rates."""

    model_config = _STRICT

    process: Literal["constant", "poisson"] = Field("poisson", description="Inter-arrival law.")
    rate: float | None = Field(None, gt=0, description="Requests per second (single run).")
    rates: list[float] | None = Field(None, description="Sweep: one run per rate, in order.")
    seed: int = Field(0, description="Seed of every random choice (arrivals, mix, payloads).")

    @model_validator(mode="after")
    def _one_of(self) -> ArrivalConfig:
        if (self.rate is None) == (self.rates is None):
            raise ValueError(f"arrival: give exactly one of rate or rates, got rate={self.rate} "
                             f"rates={self.rates}")
        if self.rates is not None:
            if not self.rates or any(r <= 0 for r in self.rates):
                raise ValueError(f"arrival.rates must be a non-empty list of positive rates, "
                                 f"got {self.rates}")
            if sorted(self.rates) != self.rates:
                raise ValueError(f"arrival.rates must be increasing, got {self.rates}")
        return self

    @property
    def rate_list(self) -> list[float]:
        """The rates to run, one for a single run."""
        return list(self.rates) if self.rates is not None else [float(self.rate or 0.0)]


class SloConfig(BaseModel):
    """Service-level objectives; any that is set and missed fails the run (non-zero exit)."""

    model_config = _STRICT

    p50_ms: float | None = Field(None, gt=0, description="Highest acceptable p50 latency.")
    p90_ms: float | None = Field(None, gt=0, description="Highest acceptable p90 latency.")
    p95_ms: float | None = Field(None, gt=0, description="Highest acceptable p95 latency.")
    p99_ms: float | None = Field(None, gt=0, description="Highest acceptable p99 latency.")
    p999_ms: float | None = Field(None, gt=0, description="Highest acceptable p99.9 latency.")
    max_ms: float | None = Field(None, gt=0, description="Highest acceptable single latency.")
    error_rate: float | None = Field(0.01, ge=0, le=1, description="Highest error share.")
    degraded_share: float | None = Field(None, ge=0, le=1, description="Highest degraded share.")
    min_throughput_ratio: float | None = Field(
        0.95, ge=0, le=1, description="Lowest achieved/target rate ratio."
    )


class StabilityConfig(BaseModel):
    """Measurement windows and the perf_analyzer-style stability rule."""

    model_config = _STRICT

    window_s: float = Field(5.0, gt=0, description="Length of one measurement window.")
    windows: int = Field(3, ge=2, description="Consecutive windows that must agree.")
    tolerance: float = Field(
        0.10, gt=0, le=1, description="Allowed relative spread of throughput and p99 around their "
        "mean across those windows."
    )


class LoadTestConfig(BaseModel):
    """A whole load test."""

    model_config = _STRICT

    name: str = Field("loadtest", description="Title of the report.")
    target: TargetConfig = Field(..., description="Where requests go.")
    models: list[ModelMix] = Field(..., min_length=1, description="Traffic mix of models/routes.")
    inputs: list[InputSource] | None = Field(None, description="Default inputs of every model.")
    payload_pool: int = Field(
        64, ge=1, le=100_000, description="Random payloads generated per model (bounded memory)."
    )
    arrival: ArrivalConfig = Field(..., description="Arrival process and rate(s).")
    duration_s: float = Field(..., gt=0, description="Measured duration of each run.")
    warmup_s: float = Field(0.0, ge=0, description="Unmeasured traffic before each run.")
    priorities: dict[str, float] = Field(
        default_factory=lambda: {"interactive": 1.0}, description="Priority name -> weight."
    )
    callers: dict[str, float] = Field(
        default_factory=lambda: {"loadtest": 1.0}, description="Caller id -> weight."
    )
    deadline_ms: float | None = Field(None, gt=0, description="deadline_ms sent with each request.")
    max_in_flight: int = Field(
        10_000, ge=1, description="Bound on outstanding requests; a send over it is not made and "
        "counts as error class 'generator_overload'."
    )
    lag_warn_ms: float = Field(
        2.0, gt=0, description="A send later than this after its planned time counts as lagging; "
        "the generator is behind when its lag p99 exceeds it, and a stability window is when its "
        "lag p99 does with at least two late sends."
    )
    workers: int | None = Field(
        None, ge=1, le=64, description="Generator processes for an HTTP target, each open loop "
        "on an interleaved share of the schedule (default: one per CPU core). A handle target "
        "always uses one (the Ray driver of this process)."
    )
    realtime: bool = Field(
        True, description="Run the generator (the HTTP worker processes; for a handle target, "
        "this process's event-loop thread) under SCHED_FIFO when permitted, so it wakes on "
        "schedule on a busy machine (it never spins; falls back to normal scheduling without "
        "the privilege, and the report says which applied)."
    )
    knee_factor: float = Field(
        2.0, gt=1, description="Sweep: latency knee where p99 exceeds this times the first p99."
    )
    stability: StabilityConfig = Field(
        default_factory=lambda: StabilityConfig.model_validate({}), description="Windows."
    )
    slo: SloConfig = Field(
        default_factory=lambda: SloConfig.model_validate({}), description="Objectives."
    )

    @field_validator("priorities")
    @classmethod
    def _priorities(cls, v: dict[str, float]) -> dict[str, float]:
        for name in v:
            try:
                parse_priority(name)
            except ValueError as e:
                raise ValueError(f"priorities.{name}: {e}") from None
        return _check_weights("priorities", v)

    @field_validator("callers")
    @classmethod
    def _callers(cls, v: dict[str, float]) -> dict[str, float]:
        return _check_weights("callers", v)

    @model_validator(mode="after")
    def _inputs_known(self) -> LoadTestConfig:
        missing = [m.name for m in self.models if m.inputs is None and self.inputs is None]
        if missing:
            raise ValueError(f"models {missing} have no inputs and there is no top-level `inputs`")
        return self

    def inputs_of(self, model: ModelMix) -> list[InputSource]:
        """Inputs of one model (its own, else the top-level default)."""
        return list(model.inputs if model.inputs is not None else (self.inputs or []))


def _check_weights(field: str, v: dict[str, float]) -> dict[str, float]:
    if not v:
        raise ValueError(f"{field}: at least one entry is required")
    bad = {k: w for k, w in v.items() if not w > 0}
    if bad:
        raise ValueError(f"{field}: weights must be positive, got {bad}")
    return v


def load_config(path: str | Path) -> LoadTestConfig:
    """Read and validate a YAML config; relative input files resolve against its folder.

    Raises ``ValueError`` with the file name and the offending fields.
    """
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ValueError(f"{p}: cannot read config ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise ValueError(f"{p}: not valid YAML ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{p}: expected a mapping at the top level")  # noqa: TRY004 - bad file
    try:
        cfg = LoadTestConfig.model_validate(raw)
    except ValidationError as e:
        raise ValueError(f"{p}: invalid load-test config:\n{_describe(e)}") from None
    return _resolve_files(cfg, p.parent)


def _describe(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def _resolve_files(cfg: LoadTestConfig, base: Path) -> LoadTestConfig:
    def fix(inputs: list[InputSource] | None) -> list[InputSource] | None:
        if inputs is None:
            return None
        return [
            i.model_copy(update={"file": base / i.file})
            if i.file is not None and not i.file.is_absolute() else i
            for i in inputs
        ]

    models = [m.model_copy(update={"inputs": fix(m.inputs)}) for m in cfg.models]
    return cfg.model_copy(update={"inputs": fix(cfg.inputs), "models": models})
