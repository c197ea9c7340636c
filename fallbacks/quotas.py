"""Per-caller quotas: concurrency limit and token-bucket rate limit.

Over a limit the caller gets ``QuotaExceeded`` (HTTP 429) at once; nobody else slows down::

    with quotas.acquire(request.caller):
        response = await pipeline(request)
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from types import TracebackType

from pydantic import BaseModel, ConfigDict, Field, model_validator

from common.clock import Clock
from fallbacks.errors import QuotaExceeded

__all__ = ["CallerLimits", "CallerQuotas", "QuotaConfig", "QuotaLease"]


class CallerLimits(BaseModel):
    """Limits of one caller. None = unlimited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrency: int | None = Field(None, ge=1, description="Requests in flight at once.")
    rate_per_s: float | None = Field(None, gt=0, description="Sustained requests per second.")
    burst: int | None = Field(
        None, ge=1, description="Token-bucket size; defaults to max(1, ceil(rate_per_s))."
    )

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> CallerLimits:
        if self.burst is not None and self.rate_per_s is None:
            raise ValueError(f"burst={self.burst} needs rate_per_s")
        return self


class QuotaConfig(BaseModel):
    """Default limits plus per-caller overrides (fields set in an override replace the default's;
    an explicit null removes that limit for the caller)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: CallerLimits = Field(default_factory=CallerLimits, description="Every caller.")
    callers: dict[str, CallerLimits] = Field(
        default_factory=dict, description="Overrides by caller name."
    )
    max_tracked_callers: int = Field(
        100_000, ge=1, description="Idle callers beyond this are forgotten (LRU)."
    )
    redis_url: str | None = Field(
        None, description="Shared Redis for cluster-wide rate limits (one GCRA script per "
        "request, see fallbacks.cluster_quotas); null = each ingress replica limits locally "
        "with its share of every rate.")
    redis_timeout_s: float = Field(
        0.05, gt=0, le=5, description="Bound on one quota round trip; past it the replica "
        "decides locally (labelled quota='local').")
    redis_retry_s: float = Field(
        1.0, gt=0, le=60, description="After a Redis failure, decide locally this long before "
        "trying Redis again (one probe, not one timeout per request).")
    key_prefix: str = Field("timeshare:quota:", min_length=1,
                            description="Redis key prefix of the per-caller GCRA state.")

    def limits_for(self, caller: str) -> CallerLimits:
        """Effective limits of ``caller``."""
        o = self.callers.get(caller)
        if o is None:
            return self.default
        merged = self.default.model_dump()
        merged.update({k: getattr(o, k) for k in o.model_fields_set})
        return CallerLimits(**merged)


@dataclass(slots=True)
class _State:
    limits: CallerLimits
    in_flight: int
    tokens: float
    refilled_at: float


class QuotaLease:
    """Holds one concurrency slot until released (idempotent); a context manager.

    ``local_fallback`` is True when the rate decision was taken by this replica alone because
    the cluster-wide store (Redis) was unavailable: answers carry it as ``quota='local'``.
    """

    __slots__ = ("_caller", "_quotas", "_released", "local_fallback")

    def __init__(self, quotas: CallerQuotas, caller: str, *, local_fallback: bool = False
                 ) -> None:
        self._quotas, self._caller, self._released = quotas, caller, False
        self.local_fallback = local_fallback

    def release(self) -> None:
        """Give the slot back (only the first call counts)."""
        if not self._released:
            self._released = True
            self._quotas._release(self._caller)

    def __enter__(self) -> QuotaLease:  # noqa: PYI034 - final class
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class CallerQuotas:
    """Enforces a :class:`QuotaConfig` in this process. Thread-safe; O(1) per call.

    ``share`` scales every limit to this replica's part of a cluster-wide limit (1/N with N
    ingress replicas): rates and bursts by ``share``, concurrency to ``ceil(limit * share)``,
    so N replicas admit at most ``N * ceil(limit / N)`` in flight.
    """

    def __init__(self, config: QuotaConfig | None = None, *, clock: Clock = time.monotonic,
                 share: float = 1.0) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share={share} must be in (0, 1]")
        self.config = config or QuotaConfig()
        self.share = share
        self._clock = clock
        self._lock = threading.Lock()
        self._states: OrderedDict[str, _State] = OrderedDict()

    async def admit(self, caller: str) -> QuotaLease:
        """The asynchronous entry point the pipeline awaits (a cluster store needs I/O)."""
        return self.acquire(caller)

    def limits_for(self, caller: str) -> CallerLimits:
        """This replica's limits of ``caller`` (the configured ones scaled by ``share``)."""
        lim = self.config.limits_for(caller)
        if self.share == 1.0:
            return lim
        c, r, b = lim.max_concurrency, lim.rate_per_s, lim.burst
        return CallerLimits(
            max_concurrency=None if c is None else max(1, math.ceil(c * self.share)),
            rate_per_s=None if r is None else r * self.share,
            burst=None if b is None else max(1, round(b * self.share)))

    def acquire(self, caller: str, *, check_rate: bool = True,
                local_fallback: bool = False) -> QuotaLease:
        """Take a slot and a token for ``caller`` or raise ``QuotaExceeded`` (field='caller').

        ``check_rate=False`` when the rate was already decided elsewhere (the cluster store).
        """
        now = self._clock()
        with self._lock:
            st = self._state(caller, now)
            lim = st.limits
            if lim.max_concurrency is not None and st.in_flight >= lim.max_concurrency:
                raise QuotaExceeded(
                    f"caller {caller!r} is over its concurrency limit "
                    f"({st.in_flight} of {lim.max_concurrency} in flight)",
                    field="caller",
                )
            if check_rate and lim.rate_per_s is not None:
                self._refill(st, now)
                if st.tokens < 1.0:
                    raise QuotaExceeded(
                        f"caller {caller!r} is over its rate limit ({lim.rate_per_s:g}/s"
                        + (" on this replica: the cluster quota store is unavailable)"
                           if local_fallback else ")"),
                        field="caller",
                    )
                st.tokens -= 1.0
            st.in_flight += 1
        return QuotaLease(self, caller, local_fallback=local_fallback)

    def in_flight(self, caller: str) -> int:
        """Requests of ``caller`` in flight now."""
        with self._lock:
            st = self._states.get(caller)
            return st.in_flight if st else 0

    def _release(self, caller: str) -> None:
        with self._lock:
            st = self._states.get(caller)
            if st is not None and st.in_flight > 0:
                st.in_flight -= 1

    @staticmethod
    def _capacity(lim: CallerLimits) -> float:
        assert lim.rate_per_s is not None
        return float(lim.burst if lim.burst is not None else max(1, int(-(-lim.rate_per_s // 1))))

    def _refill(self, st: _State, now: float) -> None:
        assert st.limits.rate_per_s is not None
        st.tokens = min(
            self._capacity(st.limits), st.tokens + (now - st.refilled_at) * st.limits.rate_per_s
        )
        st.refilled_at = now

    def _state(self, caller: str, now: float) -> _State:
        st = self._states.get(caller)
        if st is None:
            lim = self.limits_for(caller)
            tokens = self._capacity(lim) if lim.rate_per_s is not None else 0.0
            st = _State(lim, 0, tokens, now)
            self._states[caller] = st
            self._evict_idle(keep=caller)
        else:
            self._states.move_to_end(caller)
        return st

    def _evict_idle(self, *, keep: str) -> None:
        # Forgetting an idle caller only refills its bucket early; one with requests in flight
        # is kept so its releases still count.
        excess = len(self._states) - self.config.max_tracked_callers
        if excess <= 0:
            return
        for name in [n for n, s in self._states.items() if s.in_flight == 0 and n != keep][:excess]:
            del self._states[name]
