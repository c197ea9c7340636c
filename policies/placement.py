"""Placement across pool replicas: how many replicas, and which, should hold each model?

Pure: from each model's request rate and compute estimate and each replica's residency, decide a
model's *target set* of replicas. The request router ranks the target set first, so the pools
(which own residency) swap a model in where the plan says and nowhere else.

Rule:

- A model's load is ``rate_per_s * compute_s``: device-seconds per second it needs.
- It gets ``k = ceil(load / capacity_share)`` replicas, at least 1, at most all of them.
  ``capacity_share`` is the part of one replica's device time one model may take before it gets
  another replica (0.5: a model busy half the time on one replica is spread over two), so the
  replica's other models keep room.
- A cold model (``k = 1``) lives on one replica: one where it is already resident if any (no
  swap), else one holding it in its host tier (a copy, not a load from disk), else its
  rendezvous-hash home. A burst on it therefore lands on one replica, which
  swaps it in once and queues the rest behind that swap, instead of every replica swapping it in.
- A hot model keeps the replicas where it is resident, then adds replicas in its rendezvous-hash
  order. Rendezvous (highest random weight) hashing is stable: adding or losing a replica moves
  only the models whose choice involved it, and every router computes the same answer without
  talking to the others.

>>> reps = (ReplicaSlot("a"), ReplicaSlot("b", frozenset({"m"})))
>>> sorted(target_set("m", ModelLoad(rate_per_s=1.0, compute_s=0.01), reps))
['b']
>>> sorted(target_set("m", ModelLoad(rate_per_s=100.0, compute_s=0.01), reps))
['a', 'b']
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["ModelLoad", "Placement", "PlacementConfig", "ReplicaSlot", "plan_placement",
           "replicas_needed", "target_set"]


@dataclass(frozen=True, slots=True)
class PlacementConfig:
    """``capacity_share``: one model's share of a replica's device time before it is spread
    (0 < share <= 1). ``default_compute_s``: the compute estimate of a model no replica has
    measured yet (a request's device time on the pool's reference model)."""

    capacity_share: float = 0.5
    default_compute_s: float = 0.01

    def __post_init__(self) -> None:
        if not 0.0 < self.capacity_share <= 1.0:
            raise ValueError(f"capacity_share must be in (0, 1], got {self.capacity_share!r}")
        if not self.default_compute_s > 0.0:
            raise ValueError(f"default_compute_s must be > 0, got {self.default_compute_s!r}")


@dataclass(frozen=True, slots=True)
class ModelLoad:
    """One model's recent request rate (per second) and device time per request (seconds;
    None: not measured yet)."""

    rate_per_s: float
    compute_s: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaSlot:
    """One pool replica: its id, the model names resident on its device, and those in its host
    tier (a swap-in from there is a memory copy; from anywhere else, a load from disk)."""

    id: str
    resident: frozenset[str] = frozenset()
    hosted: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Placement:
    """The target replica set per model that has load; models without load live on one."""

    targets: Mapping[str, frozenset[str]] = field(default_factory=dict)
    replicas_per_model: Mapping[str, int] = field(default_factory=dict)


def replicas_needed(load: ModelLoad | None, n_replicas: int,
                    config: PlacementConfig = PlacementConfig()) -> int:
    """``ceil(rate * compute / capacity_share)`` clamped to ``[1, n_replicas]``."""
    if n_replicas <= 1 or load is None or load.rate_per_s <= 0.0:
        return 1
    compute = load.compute_s if load.compute_s and load.compute_s > 0 else config.default_compute_s
    k = math.ceil(load.rate_per_s * compute / config.capacity_share - 1e-9)
    return max(1, min(n_replicas, k))


def _weight(model: str, replica: str) -> bytes:
    # blake2b, not hash(): Python salts str hashes per process, and every router must agree.
    return hashlib.blake2b(f"{model}\x00{replica}".encode(), digest_size=8).digest()


def target_set(model: str, load: ModelLoad | None, replicas: Sequence[ReplicaSlot],
               config: PlacementConfig = PlacementConfig()) -> frozenset[str]:
    """The replicas ``model`` should be served by: its resident replicas first, then those with
    it in the host tier, then its rendezvous order, ``replicas_needed`` of them (empty when
    there are no replicas)."""
    if not replicas:
        return frozenset()
    k = replicas_needed(load, len(replicas), config)
    ordered = sorted(replicas, key=lambda r: (model not in r.resident, model not in r.hosted,
                                              _neg(_weight(model, r.id))))
    return frozenset(r.id for r in ordered[:k])


def _neg(w: bytes) -> bytes:
    # Highest weight first under an ascending sort.
    return bytes(255 - b for b in w)


def plan_placement(loads: Mapping[str, ModelLoad], replicas: Sequence[ReplicaSlot],
                   config: PlacementConfig = PlacementConfig()) -> Placement:
    """The target set of every model in ``loads`` (built whole; callers swap it in)."""
    targets = {m: target_set(m, load, replicas, config) for m, load in loads.items()}
    return Placement(targets, {m: len(t) for m, t in targets.items()})
