"""Application settings: the ``args`` of ``deploy/config.yaml`` plus an environment overlay.

``deploy/env/<environment>.yaml`` is deep-merged under the args (args win). Unknown keys are
errors naming the key, in the args and in the overlays alike.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from common.trust import TrustSettings
from fallbacks import BreakerConfig, QuotaConfig
from policies.admission import AdmissionConfig
from pool.publish import PublishSettings
from router.cache import CacheSettings
from router.edge import EdgeSettings
from router.grpc_v2.listener import GrpcSettings
from router.listener import ListenerSettings
from router.scaling import AutoscalingSettings

__all__ = ["PoolSettings", "CpuPoolSettings", "GpuPoolSettings", "AppSettings", "load_settings",
           "device_spec", "cpu_device", "ENV_DIR", "TelemetrySettings"]

ENV_DIR = Path(__file__).resolve().parent.parent / "deploy" / "env"


class PoolSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replicas: int = Field(1, ge=1, le=64, description="Replicas (GPU pool: one per GPU, capped).")
    memory_budget_mb: float | None = Field(
        None, gt=0, description="Device memory for model weights; required on CPU (stand-in)."
    )
    reserve_mb: float = Field(0, ge=0, description="Kept free for activations.")
    host_budget_mb: float | None = Field(None, gt=0, description="Host-tier bound (LRU to disk).")
    threads: int | None = Field(None, ge=1, description="torch threads; default cores/replicas.")
    slice_ms: float = Field(50.0, gt=0, description="Time slice when the working set overflows.")
    chunk_size: int = Field(256, ge=1, description="Max rows per chunk of a low-priority batch.")
    inline_ms: float = Field(
        3.0, ge=0, description="CPU devices: chunks estimated at most this long run on the "
        "pool's event loop instead of a device thread (no thread hop); 0 = never. Not used on "
        "CUDA. In the ingress's in-process pool at most 1 ms, and only for models whose graph "
        "is proven bounded by its input shapes (TorchScript or torch.export without loops).")
    pin_cores: Literal["auto", "on", "off"] = Field(
        "auto", description="CPU pools with 2+ replicas on a machine: pin each replica's "
        "threads to its own share of the physical cores. auto = on multi-socket machines only "
        "(on one socket it made no reliable difference here: docs/FORMATS.md).")


class CpuPoolSettings(PoolSettings):
    autoscaling: AutoscalingSettings | None = Field(
        None, description="Ray Serve autoscaling of the CPU pool deployment (replaces "
        "'replicas'); docs/SCALING.md. Not used when the pool runs inside the ingress.")
    placement: Literal["auto", "deployment", "ingress"] = Field(
        "auto",
        description="deployment = its own Ray Serve deployment (scales on its own, takes GPU "
                    "overflow); ingress = inside each ingress replica, saving one Serve hop per "
                    "CPU-served request; auto = ingress when no GPU pool runs, else deployment.")


class GpuPoolSettings(PoolSettings):
    enabled: Literal["auto", "on", "off"] = Field(
        "auto", description="auto = start when the Ray cluster has GPUs."
    )


class CallLogSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(
        "var/calllog.jsonl", description="JSON-lines file (when no Redis). null with no "
        "redis_url: no call log (answers still count in /v2/status and the metrics).")
    redis_url: str | None = Field(None, description="Write to a Redis stream instead.")
    max_queue: int = Field(10_000, ge=1, description="Records buffered before dropping.")


class TelemetrySettings(BaseModel):
    """Trace export (``router.tracing``). Off unless ``otlp_endpoint`` is set; off, the request
    path builds no span objects at all."""

    model_config = ConfigDict(extra="forbid")

    otlp_endpoint: str | None = Field(
        None, description="Export each traced request's spans (edge, cache, route or chain, "
        "pool queue, swap, compute, answer) by OTLP over HTTP/protobuf to this URL, e.g. "
        "http://127.0.0.1:4318/v1/traces (an OpenTelemetry Collector's OTLP/HTTP receiver); a "
        "URL without a path gets /v1/traces. null = no spans are built or sent.")
    sample_ratio: float = Field(
        1.0, ge=0.0, le=1.0, description="Share of requests traced when the request carries "
        "no sampled parent trace (parent-based sampling: a W3C traceparent header's sampled "
        "flag decides for that request; otherwise by trace id with this ratio).")
    max_queue_spans: int = Field(
        2048, ge=1, le=1_000_000, description="Spans waiting for export, at most (the batch "
        "processor's queue); past it new spans are dropped, never waited for. A traced request "
        "makes 6 to 10 spans.")
    max_export_batch: int = Field(
        512, ge=1, le=1_000_000, description="Spans per OTLP request to the receiver, at "
        "most; not above max_queue_spans.")
    export_interval_ms: float = Field(
        1000.0, gt=0, le=600_000, description="A batch leaves at least this often (or as "
        "soon as it is full).")
    export_timeout_ms: float = Field(
        10_000.0, gt=0, le=600_000, description="One export's time limit, retries included.")

    @field_validator("otlp_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return None
        url = urlsplit(v)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ValueError(f"expected an http:// or https:// URL, got {v!r}")
        return v if url.path not in ("", "/") else v.rstrip("/") + "/v1/traces"

    @model_validator(mode="after")
    def _batch_fits_queue(self) -> TelemetrySettings:
        if self.max_export_batch > self.max_queue_spans:
            raise ValueError(f"max_export_batch ({self.max_export_batch}) must not exceed "
                             f"max_queue_spans ({self.max_queue_spans})")
        return self


class AppSettings(BaseModel):
    """Everything the app builder needs. Every field has a description."""

    model_config = ConfigDict(extra="forbid")

    repository: str = Field(..., description="Model repository folder.")
    state_dir: str | None = Field(None,
                                  description="State folder; default <repository>/.timeshare.")
    environment: Literal["test", "staging", "prod"] = Field("test", description="Overlay name.")
    api_key: str | None = Field(
        None, description="Operator key for /v2/repository/* and /v2/status (401 without it).")
    api_key_env: str | None = Field(
        "TIMESHARE_API_KEY", description="Environment variable read when api_key is unset."
    )
    caller_keys: dict[str, str] | None = Field(
        None, description="Caller keys: key -> caller identity. When set, a request's caller "
        "is the identity of the key it presents (Authorization: Bearer KEY or X-API-Key; "
        "InferenceRequest.caller_key on the handle API); a declared caller that differs is a "
        "403, and a request without a key is served as 'anonymous'.")
    caller_keys_env: str | None = Field(
        None, description="Environment variable holding the caller keys as a JSON object "
        "{key: identity}, read when caller_keys is unset; unset variable = no caller keys. "
        "How a Kubernetes Secret reaches the app without the keys in its config "
        "(deploy/kubernetes, docs/SCALING.md).")
    trust: TrustSettings = Field(
        default_factory=TrustSettings,
        description="What model configs may execute: the module allowlist for architecture "
        "factories and rule callables, and whether TorchScript loads (see common.trust).")
    poll_interval_s: float = Field(1.0, gt=0, le=3600, description="Repository poll period.")
    default_deadline_ms: float = Field(1000.0, gt=0, description="Deadline when none is given.")
    fallback_margin_ms: float = Field(10.0, ge=0, description="Budget kept for the fallback.")
    max_body_bytes: int = Field(32 << 20, gt=0, description="Largest HTTP body accepted (413).")
    publish: PublishSettings = Field(default_factory=PublishSettings,
                                     description="Bounds of the model publish API.")
    compile_cache_dir: str | None = Field(
        None, description="Inductor cache for compile: models, shared by the replicas of a "
        "machine and kept across restarts; default <state_dir>/inductor.")
    ingress_replicas: int = Field(1, ge=1, le=64, description="Ingress replicas.")
    ingress_autoscaling: AutoscalingSettings | None = Field(
        None, description="Ray Serve autoscaling of the ingress (replaces ingress_replicas); "
        "docs/SCALING.md.")
    cpu_pool: CpuPoolSettings = Field(
        default_factory=lambda: CpuPoolSettings(memory_budget_mb=1024),
        description="CPU session pool.",
    )
    gpu_pool: GpuPoolSettings = Field(default_factory=GpuPoolSettings, description="GPU pool.")
    routes: list[dict[str, Any]] | str | None = Field(
        None, description="Routes (virtual models): a list, or a routes YAML file path.")
    cache: CacheSettings = Field(default_factory=CacheSettings,
                                 description="Result cache; no redis_url = in-process only.")
    breaker: BreakerConfig = Field(default_factory=BreakerConfig,
                                   description="Circuit breaker per (model, pool).")
    admission: AdmissionConfig | None = Field(
        default_factory=AdmissionConfig, description="Shedding by priority; null disables.")
    pool_capacity: int = Field(64, ge=1, description="In-flight requests per pool before shedding.")
    edge: EdgeSettings = Field(default_factory=EdgeSettings,
                               description="The front door's limits and admission (#14).")
    listener: ListenerSettings = Field(
        default_factory=ListenerSettings,
        description="Timeshare's own HTTP port in every ingress replica (router.listener).")
    grpc: GrpcSettings = Field(
        default_factory=GrpcSettings,
        description="The Open Inference Protocol over gRPC in every ingress replica "
                    "(router.grpc_v2): port, bind address, message size limit.")
    quotas: QuotaConfig | None = Field(None, description="Per-caller concurrency/rate limits.")
    alerting: dict[str, Any] | None = Field(
        None, description="alerting.AlertingConfig; null = no alerter deployment.")
    alert_eval_interval_s: float = Field(5.0, gt=0, description="Alert rule evaluation period.")
    slow_request_s: float = Field(1.0, gt=0, description="Requests slower than this count as slow.")
    call_log: CallLogSettings = Field(default_factory=lambda: CallLogSettings(),
                                      description="Per-caller call log (cost attribution).")
    telemetry: TelemetrySettings = Field(
        default_factory=TelemetrySettings,
        description="Trace export over OTLP: endpoint, sampling, export queue bounds.")
    prometheus_port: int | None = Field(
        None, ge=1, le=65535, description="Serve Timeshare's Prometheus metrics here; "
        "null = its request and queue-delay histograms are not recorded at all (nothing would "
        "read them), while Ray Serve's own metrics, alerts and /v2/status are unchanged.")

    def resolved_state_dir(self) -> str:
        return self.state_dir or str(Path(self.repository) / ".timeshare")

    def resolved_api_key(self) -> str | None:
        if self.api_key:
            return self.api_key
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def resolved_caller_keys(self) -> dict[str, str] | None:
        """``caller_keys``, else the JSON object in ``$caller_keys_env``. A malformed value is
        an error naming the variable, never echoing its content (it holds secrets)."""
        if self.caller_keys is not None:
            return self.caller_keys
        raw = os.environ.get(self.caller_keys_env) if self.caller_keys_env else None
        if raw is None:
            return None
        where = f"caller_keys_env: ${self.caller_keys_env}"
        try:
            keys = json.loads(raw)
        except ValueError:
            raise ValueError(f"{where} is not a JSON object {{key: identity}}") from None
        if not isinstance(keys, dict) or not keys:
            raise ValueError(f"{where}: expected a non-empty JSON object {{key: identity}}")
        bad = [i for i, (k, v) in enumerate(keys.items())
               if not isinstance(v, str) or not k or not v]
        if bad:
            raise ValueError(f"{where}: entry {bad[0]} needs a non-empty key and a non-empty "
                             "string identity")
        return keys


MB = 1 << 20


def device_spec(kind: str, s: PoolSettings) -> dict[str, Any]:
    """The ``pool.device.DeviceSpec`` fields of a pool's settings."""
    return {
        "kind": kind,
        "memory_budget_bytes": int(s.memory_budget_mb * MB) if s.memory_budget_mb else None,
        "reserve_bytes": int(s.reserve_mb * MB),
        "host_budget_bytes": int(s.host_budget_mb * MB) if s.host_budget_mb else None,
        "slice_ms": s.slice_ms,
        "chunk_size": s.chunk_size,
        "threads": s.threads,
        "inline_ms": s.inline_ms,
        "pin_cores": s.pin_cores,
    }


def cpu_device(s: PoolSettings) -> dict[str, Any]:
    return device_spec("cpu", s)


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_settings(args: dict[str, Any], *, env_dir: Path = ENV_DIR) -> AppSettings:
    """Validate app args merged over the environment overlay; errors name the key and file."""
    env = args.get("environment", "test")
    overlay: dict[str, Any] = {}
    path = env_dir / f"{env}.yaml"
    if path.exists():
        overlay = yaml.safe_load(path.read_text()) or {}
        if not isinstance(overlay, dict):
            raise ValueError(f"{path}: expected a mapping")
    try:
        settings = AppSettings.model_validate(_merge(overlay, args))
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"])
        raise ValueError(f"timeshare settings (args + {path.name}): {key}: {err['msg']}") from None
    update: dict[str, Any] = {"repository": str(Path(settings.repository).resolve())}
    if isinstance(settings.routes, str):
        update["routes"] = str(Path(settings.routes).resolve())
    if settings.call_log.path:
        update["call_log"] = settings.call_log.model_copy(
            update={"path": str(Path(settings.call_log.path).resolve())})
    return settings.model_copy(update=update)
