"""Public value types and settings of the result cache."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Answer", "CacheOutcome", "CacheSettings", "CacheTier", "CachedAnswer", "answer_nbytes"]

CacheTier = Literal["memory", "redis", "semantic", "miss", "bypass", "off"]


class Answer(Protocol):
    """What the cache needs of a computed answer: its outputs and who produced them. The
    pipeline hands it the fallback chain's own result (``fallbacks.ChainResult``), whose
    labels (degraded, reason, the model's timings) then reach every caller sharing the
    computation; the cache stores a read-only :class:`CachedAnswer` copy."""

    @property
    def outputs(self) -> Mapping[str, np.ndarray]: ...

    @property
    def served_by(self) -> str: ...

    @property
    def version(self) -> str | None: ...


def answer_nbytes(answer: Answer) -> int:
    """Bytes of the output tensors (what ``max_value_bytes`` bounds)."""
    return sum(int(np.asarray(a).nbytes) for a in answer.outputs.values())


@dataclass(frozen=True, slots=True)
class CachedAnswer:
    """A model answer as the cache stores it: output tensors plus who produced them.

    Arrays returned from the cache are read-only; copy before mutating.
    """

    outputs: Mapping[str, np.ndarray]
    served_by: str
    version: str | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of the output tensors (what ``max_value_bytes`` bounds)."""
        return answer_nbytes(self)


@dataclass(frozen=True, slots=True)
class CacheOutcome:
    """Where an answer came from.

    ``tier``: ``memory``/``redis``/``semantic`` = cache hit; ``miss`` = looked, computed;
    ``bypass`` = computed while the Redis tier was unavailable; ``off`` = not looked up (mode
    none or ``skip_read``). ``similarity`` is set for semantic hits only. ``shared`` is true when
    the request joined an identical in-flight request instead of doing the work itself.
    """

    tier: CacheTier
    similarity: float | None = None
    shared: bool = False


class CacheSettings(BaseModel):
    """Application-wide cache settings (per-model policy lives in ``pool.config.CacheConfig``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    redis_url: str | None = Field(
        default=None,
        description="Redis URL for the shared exact tier; in-process only when omitted.",
    )
    redis_timeout_s: float = Field(
        default=0.1,
        gt=0,
        le=5,
        description="Connect and per-command timeout; slower = tier bypassed.",
    )
    redis_backoff_s: float = Field(
        default=0.5, gt=0, description="First wait before probing Redis again after it failed."
    )
    redis_backoff_max_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait between probes (the wait doubles per failed probe).",
    )
    redis_max_connections: int = Field(
        default=64,
        ge=1,
        description="Connection pool bound; a request waits at most the timeout for one.",
    )
    key_prefix: str = Field(default="ts:rc:", description="Prefix of every Redis key.")
    memory_max_entries: int = Field(
        default=10_000, ge=1, description="In-process LRU bound (entries)."
    )
    memory_max_bytes: int = Field(
        default=256 << 20, ge=1, description="In-process LRU bound (bytes)."
    )
    semantic_dir: str | None = Field(
        default=None,
        description="Directory of the semantic stores (sqlite + faiss); tier off if omitted.",
    )
    semantic_threshold: float = Field(
        default=0.85,
        ge=0,
        le=1,
        description="Default cosine similarity a semantic hit needs (0.85: 0 wrong hits and 89% "
        "paraphrase recall on the bundled near-miss set, with the lexical guard; "
        "docs/CACHE.md).",
    )
    semantic_max_entries: int = Field(
        default=10_000,
        ge=1,
        description="Entries per (model, version) semantic store (LRU eviction).",
    )
    semantic_max_stores: int = Field(
        default=32,
        ge=1,
        description="Open (model, version) semantic stores; least recent one closed.",
    )
    semantic_top_k: int = Field(
        default=3, ge=1, le=32, description="Neighbours checked per lookup."
    )
    verify_max_error_rate: float | None = Field(
        default=None,
        gt=0,
        lt=1,
        description="Verified mode (vCache-style) when set: semantic hits are served only where "
        "the error rate observed by verification stays within this bound; per-entry learned "
        "thresholds replace semantic_threshold. Off (plain threshold) when omitted.",
    )
    verify_sample_rate: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="Verified mode: share of served semantic hits re-computed in the background "
        "and compared with the cached answer.",
    )
    verify_min_similarity: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="Verified mode: candidates below this similarity are plain misses (not "
        "compared).",
    )
    verify_window: int = Field(
        default=5000,
        ge=10,
        description="Verified mode: last verification outcomes the global threshold uses.",
    )
    max_pending_writes: int = Field(
        default=256,
        ge=1,
        description="Background semantic writes in flight; more are dropped (counted).",
    )

    @model_validator(mode="after")
    def _check(self) -> CacheSettings:
        if self.redis_backoff_max_s < self.redis_backoff_s:
            raise ValueError(
                f"redis_backoff_max_s ({self.redis_backoff_max_s}) must be >= redis_backoff_s "
                f"({self.redis_backoff_s})"
            )
        if self.redis_url is not None and not self.redis_url.startswith(
            ("redis://", "rediss://", "unix://")
        ):
            raise ValueError(
                f"redis_url must start with redis://, rediss:// or unix://, got {self.redis_url!r}"
            )
        return self
