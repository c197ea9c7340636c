"""``ResultCache``: the one object the request pipeline talks to.

Lookup order for a model whose policy caches: in-process LRU → Redis (exact) → semantic (text
requests of ``mode: semantic`` models) → compute. Identical concurrent misses share one lookup and
one compute (single flight). Cacheable answers no larger than ``max_value_bytes`` are written to
every tier that applies. Redis trouble never fails a request: the tier is bypassed and labelled.

Verified mode (``CacheSettings.verify_max_error_rate``, docs/CACHE.md): a semantic candidate is
served only when ``policies.verified_cache`` says so; a sampled share of served hits is
re-computed in the background and compared, and a candidate not served is compared with the
answer computed instead. ``verification()`` reports the observed error rate.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from policies.verified_cache import VerifyConfig
from pool.config import CacheConfig
from router.cache._private import codec
from router.cache._private.availability import EventSink
from router.cache._private.keys import cache_key
from router.cache._private.memory import MemoryLRU
from router.cache._private.metrics import CacheCounters
from router.cache._private.redis_tier import BYPASS, RedisTier
from router.cache._private.semantic import SemanticLookup, SemanticTier
from router.cache._private.single_flight import Flights
from router.cache._private.verified import Verifier, VerifierStatus, same_answer
from router.cache.embedder import Embedder
from router.cache.types import Answer, CachedAnswer, CacheOutcome, CacheSettings, answer_nbytes
from router.schemas import CacheControl

__all__ = ["CacheLookup", "Compute", "ResultCache"]

log = logging.getLogger(__name__)

Compute = Callable[[], Awaitable[tuple[Answer, bool]]]
"""Runs the model: returns the answer and whether it may be cached (degraded answers may not)."""

_OFF = CacheOutcome("off")
_MEMORY = CacheOutcome("memory")
_MISS = CacheOutcome("miss")
_BYPASS = CacheOutcome("bypass")
_REDIS = CacheOutcome("redis")


@dataclass(frozen=True, slots=True)
class _Request:
    """What one ``get_or_compute`` call is about, passed between its steps."""

    key: str
    model: str
    version: str
    text: str | None
    policy: CacheConfig
    control: CacheControl


@dataclass(slots=True)
class CacheLookup:
    """One request's lookup (:meth:`ResultCache.lookup`): ``answer`` is the cache's (a hit,
    or the answer another caller computed for the same key: ``outcome.shared``), or None: a
    miss the caller computes and hands back (:meth:`ResultCache.store`). ``outcome`` says where
    the answer came from. ``verify``: a semantic hit that verified mode samples for a check in
    the background (:meth:`ResultCache.verify_in_background`). The rest is the cache's own
    state for ``store``."""

    answer: Answer | None
    outcome: CacheOutcome
    verify: SemanticLookup | None = None
    _req: _Request | None = None
    _candidate: SemanticLookup | None = None
    _vec: np.ndarray | None = None
    _flight: str | None = None


_UNCACHED = CacheLookup(None, _OFF)  # not looked up, nothing to store: shared, never changed


def _frozen(answer: Answer) -> CachedAnswer:
    """A private read-only copy, so neither the caller nor later readers can change the entry."""
    outputs: dict[str, np.ndarray] = {}
    for name, value in answer.outputs.items():
        arr = np.array(value, copy=True, order="C")
        arr.setflags(write=False)
        outputs[name] = arr
    return CachedAnswer(outputs=outputs, served_by=answer.served_by, version=answer.version)


class ResultCache:
    """Result cache facade. Build one per router replica; call :meth:`close` when done.

    Args:
        settings: application-wide settings (Redis URL, LRU bounds, semantic store directory).
        embedder: required when ``settings.semantic_dir`` is set (e.g. ``MiniLMEmbedder.load()``).
        clock: wall-clock seconds; TTLs and Redis probe backoff use it.
        on_event: ``on_event(kind, detail)`` for alerts, e.g. ``redis_cache_unavailable`` once per
            outage and ``redis_cache_recovered`` when it returns. Exceptions it raises are logged.
        rng: uniform [0, 1) draws; verified mode samples the hits it verifies with it.
    """

    def __init__(
        self,
        settings: CacheSettings | None = None,
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.time,
        on_event: EventSink | None = None,
        rng: Callable[[], float] = random.random,
    ) -> None:
        self._settings = settings = settings or CacheSettings()
        self._clock = clock
        self._memory = MemoryLRU(
            max_entries=settings.memory_max_entries,
            max_bytes=settings.memory_max_bytes,
            clock=clock,
        )
        self._redis = (
            RedisTier(settings, clock=clock, on_event=on_event) if settings.redis_url else None
        )
        if settings.semantic_dir is not None and embedder is None:
            raise ValueError(
                "semantic_dir is set but no embedder was given: pass "
                "embedder=MiniLMEmbedder.load() (or unset semantic_dir to disable the tier)"
            )
        self._semantic = (
            SemanticTier(settings, embedder=embedder, clock=clock)
            if settings.semantic_dir is not None and embedder is not None
            else None
        )
        self._verifier = (
            Verifier(VerifyConfig(max_error_rate=settings.verify_max_error_rate,
                                  sample_rate=settings.verify_sample_rate,
                                  min_similarity=settings.verify_min_similarity),
                     window=settings.verify_window, rng=rng)
            if settings.verify_max_error_rate is not None else None
        )
        self._flights: Flights[tuple[Answer, CacheOutcome]] = Flights()
        self._counters = CacheCounters()
        self._pending: set[asyncio.Task[None]] = set()

    # -- the pipeline's steps: lookup, then (on a miss) store or release -------------------------

    async def lookup(self, *, model: str, version: str, inputs: Mapping[str, np.ndarray],
                     text: str | None, policy: CacheConfig, control: CacheControl
                     ) -> CacheLookup:
        """The cache's answer, or a miss the caller computes and then hands to :meth:`store`
        (or, when computing fails, to :meth:`release`). Identical concurrent misses share one
        lookup of the shared tiers and one computation: the first caller computes, the others
        wait here for its answer (a caller that goes away lets the next one compute).
        ``skip_read`` looks nothing up (outcome ``off``) but still stores unless
        ``skip_write``; ``mode: none`` neither reads nor writes."""
        if policy.mode == "none":
            self._counters.inc("off")
            return _UNCACHED
        if control.skip_read and control.skip_write:  # no key needed: nothing read or written
            self._counters.inc("skip_read")
            return _UNCACHED
        key = cache_key(self._settings.key_prefix, model, version, inputs)
        req = _Request(key, model, version, text, policy, control)
        if control.skip_read:
            self._counters.inc("skip_read")
            return CacheLookup(None, _OFF, _req=req)
        hit = self._memory.get(key)
        if hit is not None:
            self._counters.inc("memory.hit")
            return CacheLookup(hit, _MEMORY)
        self._counters.inc("memory.miss")
        flight = key if not control.skip_write else key + "|no-write"
        leads, shared = await self._flights.join(flight)
        if not leads:
            assert shared is not None
            self._counters.inc("single_flight.shared")
            return CacheLookup(shared[0], replace(shared[1], shared=True))
        try:
            found = await self._lookup_shared_tiers(req)
        except BaseException as e:
            self._flights.fail(flight, e)
            raise
        if found.answer is not None:
            self._flights.settle(flight, (found.answer, found.outcome))
            return found
        self._counters.inc("compute")
        found._flight = flight
        return found

    async def store(self, lookup: CacheLookup, answer: Answer, cacheable: bool) -> None:
        """The answer computed after ``lookup`` missed: written to every tier that applies
        (unless it is degraded: ``cacheable`` False), compared with a verified-mode candidate
        that was not served, and handed to the callers that waited for it."""
        req = lookup._req
        if req is None:  # nothing to write (mode none, or neither read nor written)
            return
        try:
            candidate = lookup._candidate
            if candidate is not None and cacheable:
                self._verified(candidate, answer, served=False)
            if not req.control.skip_write:
                await self._fill(req, answer, cacheable, lookup._vec)
        except BaseException as e:
            self.release(lookup, e)
            raise
        if lookup._flight is not None:
            self._flights.settle(lookup._flight, (answer, lookup.outcome))

    def release(self, lookup: CacheLookup, error: BaseException) -> None:
        """Computing after ``lookup`` failed with ``error``: the callers that waited for it get
        the error too (a cancellation lets the next of them compute instead)."""
        if lookup._flight is not None:
            self._flights.fail(lookup._flight, error)

    def verify_in_background(self, lookup: CacheLookup, compute: Compute) -> None:
        """Verified mode: ``lookup`` served a semantic hit whose check the policy sampled
        (``lookup.verify``); run ``compute`` off the request's path and record whether its
        answer confirms the hit (bounded by ``max_pending_writes``, else counted)."""
        if lookup.verify is not None:
            self._spawn(self._verify_in_background(lookup.verify, compute),
                        "semantic.verify.dropped")

    async def get_or_compute(
        self,
        *,
        model: str,
        version: str,
        inputs: Mapping[str, np.ndarray],
        text: str | None,
        policy: CacheConfig,
        control: CacheControl,
        compute: Compute,
    ) -> tuple[Answer, CacheOutcome]:
        """:meth:`lookup`, then on a miss ``compute`` and :meth:`store` (for callers that hold
        their computation as a callable; the pipeline takes the steps itself)."""
        found = await self.lookup(model=model, version=version, inputs=inputs, text=text,
                                  policy=policy, control=control)
        if found.answer is not None:
            self.verify_in_background(found, compute)
            return found.answer, found.outcome
        try:
            answer, cacheable = await compute()
        except BaseException as e:
            self.release(found, e)
            raise
        await self.store(found, answer, cacheable)
        return answer, found.outcome

    async def _lookup_shared_tiers(self, req: _Request) -> CacheLookup:
        """Redis, then (text requests of semantic models) the semantic tier: a hit, or the
        miss to compute, with what its store needs (a candidate to compare, the embedding)."""
        text, policy = req.text, req.policy
        bypassed = False
        if self._redis is not None:
            payload = await self._redis.get(req.key)
            if payload is BYPASS:
                bypassed = True
                self._counters.inc("redis.bypass")
            elif payload is None:
                self._counters.inc("redis.miss")
            else:
                found = self._from_redis(req.key, payload, policy)  # type: ignore[arg-type]
                if found is not None:
                    return CacheLookup(found, _REDIS)
        vec, candidate = None, None
        if policy.mode == "semantic" and text and self._semantic is not None:
            res = await self._semantic_lookup(req)
            if res is not None and res.answer is not None:
                served = self._serve_semantic(res)
                if served is not None:
                    return served
                candidate = res  # verified mode, not served: compared after computing
            vec = None if res is None else res.embedding
        return CacheLookup(None, _BYPASS if bypassed else _MISS, _req=req,
                           _candidate=candidate, _vec=vec)

    async def _semantic_lookup(self, req: _Request) -> SemanticLookup | None:
        """The best guard-compatible candidate: at the threshold, or (verified mode) at the
        lowest similarity worth comparing. None when the tier failed (counted, logged)."""
        assert self._semantic is not None and req.text
        if self._verifier is not None:
            threshold = self._verifier.config.min_similarity
        elif req.policy.similarity_threshold is not None:
            threshold = req.policy.similarity_threshold
        else:
            threshold = self._settings.semantic_threshold
        try:
            res = await self._semantic.lookup(model=req.model, version=req.version,
                                              text=req.text, threshold=threshold,
                                              ttl_s=req.policy.ttl_s)
        except Exception:
            log.exception("semantic cache lookup failed for %s@%s", req.model, req.version)
            self._counters.inc("semantic.error")
            return None
        self._counters.inc("semantic.guard_rejected", res.guard_rejections)
        if res.answer is None:
            self._counters.inc("semantic.miss")
        return res

    def _serve_semantic(self, res: SemanticLookup) -> CacheLookup | None:
        """The hit to return (``verify`` set when the policy samples it for a check in the
        background), or None when verified mode decides to compute instead."""
        assert res.answer is not None and res.similarity is not None
        outcome = CacheOutcome("semantic", similarity=res.similarity)
        if self._verifier is None or res.entry is None:
            self._counters.inc("semantic.hit")
            return CacheLookup(res.answer, outcome)
        decision = self._verifier.decide(res.entry, res.similarity)
        if not decision.serve:
            self._counters.inc(f"semantic.verify.{decision.reason}")
            return None
        self._counters.inc("semantic.hit")
        return CacheLookup(res.answer, outcome, verify=res if decision.verify else None)

    async def _verify_in_background(self, res: SemanticLookup, compute: Compute) -> None:
        try:
            fresh, cacheable = await compute()
        except Exception as e:  # noqa: BLE001 - verification never affects an answer
            log.info("semantic hit verification failed: %s", e)
            self._counters.inc("semantic.verify.error")
            return
        if cacheable:  # a degraded fresh answer proves nothing
            self._verified(res, fresh, served=True)

    def _verified(self, res: SemanticLookup, fresh: Answer, *, served: bool) -> None:
        assert self._verifier is not None and res.entry is not None
        assert res.answer is not None and res.similarity is not None
        ok = same_answer(res.answer, fresh)
        self._verifier.record(res.entry, res.similarity, ok, served=served)
        self._counters.inc(f"semantic.verify.{'right' if ok else 'wrong'}")

    def _from_redis(self, key: str, payload: bytes, policy: CacheConfig) -> CachedAnswer | None:
        try:
            answer, created_at = codec.decode(payload)
        except codec.CodecError as e:
            log.warning("ignoring corrupt redis cache entry %s: %s", key, e)
            self._counters.inc("redis.corrupt")
            return None
        self._counters.inc("redis.hit")
        remaining = policy.ttl_s - (self._clock() - created_at)
        if remaining > 0:  # write back so the next read stays in-process
            self._memory.put(key, answer, ttl_s=remaining, nbytes=answer.nbytes)
        return answer

    async def _fill(
        self, req: _Request, answer: Answer, cacheable: bool, vec: np.ndarray | None
    ) -> None:
        key, model, version, text, policy = req.key, req.model, req.version, req.text, req.policy
        if not cacheable:
            self._counters.inc("skip.uncacheable")
            return
        nbytes = answer_nbytes(answer)
        if nbytes > policy.max_value_bytes:
            self._counters.inc("skip.too_large")
            return
        stored = _frozen(answer)
        self._memory.put(key, stored, ttl_s=policy.ttl_s, nbytes=nbytes)
        self._counters.inc("memory.write")
        semantic = policy.mode == "semantic" and bool(text) and self._semantic is not None
        if self._redis is None and not semantic:
            return
        try:
            payload = codec.encode(stored, created_at=self._clock())
        except codec.CodecError as e:
            log.warning("answer of %s@%s not shareable: %s", model, version, e)
            self._counters.inc("skip.unencodable")
            return
        if self._redis is not None:
            ok = await self._redis.set(key, payload, policy.ttl_s)
            self._counters.inc("redis.write" if ok else "redis.write_skipped")
        if semantic:
            self._spawn_semantic_write(model, version, text or "", vec, payload)

    def _spawn(self, work: Coroutine[Any, Any, None], dropped: str) -> None:
        """Run ``work`` in the background, bounded by ``max_pending_writes`` (else counted)."""
        if len(self._pending) >= self._settings.max_pending_writes:
            work.close()
            self._counters.inc(dropped)
            return
        task = asyncio.ensure_future(work)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def _spawn_semantic_write(
        self, model: str, version: str, text: str, vec: np.ndarray | None, payload: bytes
    ) -> None:
        assert self._semantic is not None

        async def write() -> None:
            try:
                await self._semantic.store(  # type: ignore[union-attr]
                    model=model, version=version, text=text, embedding=vec, payload=payload
                )
                self._counters.inc("semantic.write")
            except Exception:
                log.exception("semantic cache write failed for %s@%s", model, version)
                self._counters.inc("semantic.error")

        self._spawn(write(), "semantic.write_dropped")

    # -- introspection and lifecycle ------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Snapshot of the counters: ``<tier>.hit|miss|bypass|write...``, ``compute``, ``skip.*``,
        ``single_flight.shared``."""
        return self._counters.snapshot()

    def verification(self) -> VerifierStatus | None:
        """Verified mode's figures (observed error rate, threshold), None when it is off."""
        return None if self._verifier is None else self._verifier.status()

    @property
    def redis_available(self) -> bool | None:
        """None without Redis; otherwise whether the Redis tier is currently used."""
        return None if self._redis is None else self._redis.availability.up

    @property
    def idle(self) -> bool:
        """True when no lookup/compute is in flight and no background write is pending."""
        return len(self._flights) == 0 and not self._pending

    def clear_memory(self) -> None:
        """Drop the in-process tier (e.g. in tests or after a bulk model change)."""
        self._memory.clear()

    async def drain(self) -> None:
        """Wait for background writes (semantic stores) to finish."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def close(self) -> None:
        """Wait for in-flight work and background writes, then close Redis and semantic stores."""
        await self._flights.wait_idle()
        await self.drain()
        if self._redis is not None:
            await self._redis.close()
        if self._semantic is not None:
            await self._semantic.close()
