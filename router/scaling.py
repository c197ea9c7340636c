"""Replica counts on a cluster: Ray Serve autoscaling for the ingress and the CPU pool (#19).

GPU pools are never autoscaled: one replica per GPU (a replica owns its device's memory
manager). The numbers each environment uses, and why, are in ``docs/SCALING.md``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["AutoscalingSettings", "ingress_policy", "replica_options", "sharing_replicas"]

# Requests in flight on the ingress's own listener (router.listener), reported per replica
# through ``Ingress.record_autoscaling_stats``: Serve's own count never sees them.
LISTENER_METRIC = "timeshare_listener_ongoing"


class AutoscalingSettings(BaseModel):
    """The subset of Ray Serve's ``autoscaling_config`` Timeshare exposes per environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_replicas: int = Field(1, ge=1, le=64, description="Never fewer (no scale to zero: the "
                              "first request would wait for a replica and its models).")
    max_replicas: int = Field(1, ge=1, le=64, description="Never more.")
    target_ongoing_requests: float = Field(
        ..., gt=0, description="Requests in flight per replica Serve aims for.")
    upscale_delay_s: float = Field(10.0, ge=0, description="Load must stay high this long.")
    downscale_delay_s: float = Field(300.0, ge=0, description="Load must stay low this long.")

    @model_validator(mode="after")
    def _order(self) -> AutoscalingSettings:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas={self.min_replicas} exceeds "
                             f"max_replicas={self.max_replicas}")
        return self


def replica_options(replicas: int, autoscaling: AutoscalingSettings | None, *,
                    policy: str | None = None) -> dict[str, Any]:
    """``Deployment.options`` keywords: a fixed count, or Serve's autoscaling config (with
    ``policy``, an import path, as its policy function instead of Serve's default)."""
    if autoscaling is None:
        return {"num_replicas": replicas}
    config = autoscaling.model_dump()
    if policy is not None:
        config["policy"] = {"policy_function": policy}
    return {"num_replicas": "auto", "autoscaling_config": config}


def ingress_policy(ctx: Any) -> tuple[float, dict[str, Any]]:
    """Serve's default target-ongoing-requests rule over every request an ingress replica
    serves: Serve's own count plus the listener's (``LISTENER_METRIC``, each replica's mean
    over the look-back window). Serve applies min/max, the delays and the factors around it."""
    if ctx.current_num_replicas == 0:
        return ctx.target_num_replicas, {}
    metrics = ctx.aggregated_metrics or {}
    listener = sum(metrics.get(LISTENER_METRIC, {}).values())
    ongoing = ctx.total_num_requests + listener
    return ongoing / ctx.config.get_target_ongoing_requests(), {}


def sharing_replicas(replicas: int, autoscaling: AutoscalingSettings | None) -> int:
    """How many replicas share a cluster-wide limit when each must decide alone: the fewest
    that run (so a local fallback over-admits at most max/min times, never starves)."""
    return replicas if autoscaling is None else autoscaling.min_replicas
