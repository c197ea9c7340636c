"""Semantic tier: GPTCache's sqlite + faiss store, one store per (model, version).

GPTCache's data manager holds the questions, answers and vectors (faiss ``IDMap,Flat`` over unit
vectors, L2 metric, so cosine = 1 - d/2) with its LRU eviction bounding each store. We search it
directly rather than through ``gptcache.adapter`` because the answer must carry the similarity and
pass the lexical guard. All GPTCache and embedding work runs on one worker thread, which keeps
sqlite and faiss single-threaded and off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router.cache._private import codec
from router.cache._private.text_guard import compatible
from router.cache.embedder import Embedder
from router.cache.types import CachedAnswer, CacheSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SemanticLookup:
    """Result of one lookup: ``answer`` set on a hit; ``similarity`` of the best candidate;
    ``entry`` identifies the hit's store entry (verified mode keeps evidence per entry)."""

    answer: CachedAnswer | None
    similarity: float | None
    embedding: np.ndarray
    guard_rejections: int = 0
    entry: tuple[str, int] | None = None


def _store_dirname(model: str, version: str, embedder: Embedder) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", f"{model}@{version}")[:80]
    digest = hashlib.blake2b(
        f"{model}\0{version}\0{embedder.name}\0{embedder.dimension}".encode(), digest_size=8
    ).hexdigest()
    return f"{safe}-{digest}"


class SemanticTier:
    """Similarity lookups and writes for text requests."""

    def __init__(
        self, settings: CacheSettings, *, embedder: Embedder, clock: Callable[[], float]
    ) -> None:
        assert settings.semantic_dir is not None
        self._root = Path(settings.semantic_dir)
        self._embedder = embedder
        self._clock = clock
        self._max_entries = settings.semantic_max_entries
        self._max_stores = settings.semantic_max_stores
        self._top_k = settings.semantic_top_k
        # One thread: sqlite connections and faiss indexes are only touched from it.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="semantic-cache")
        self._stores: OrderedDict[str, Any] = OrderedDict()  # worker thread only

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def lookup(
        self, *, model: str, version: str, text: str, threshold: float, ttl_s: float
    ) -> SemanticLookup:
        """Best live, guard-compatible neighbour of ``text`` at or above ``threshold``."""
        return await self._run(self._lookup_sync, model, version, text, threshold, ttl_s)

    async def store(
        self, *, model: str, version: str, text: str, embedding: np.ndarray | None, payload: bytes
    ) -> None:
        """Save ``payload`` (an encoded answer) under ``text``; embeds it when no vector given."""
        await self._run(self._store_sync, model, version, text, embedding, payload)

    async def close(self) -> None:
        """Flush faiss indexes to disk and close every store."""
        await self._run(self._close_sync)
        self._executor.shutdown(wait=True)

    # -- worker thread -------------------------------------------------------------------------

    def _open(self, model: str, version: str) -> Any:
        # lazy: gptcache is heavy (faiss, sqlalchemy) and only a semantic tier uses it
        from gptcache.manager import CacheBase, VectorBase, get_data_manager

        name = _store_dirname(model, version, self._embedder)
        store = self._stores.get(name)
        if store is not None:
            self._stores.move_to_end(name)
            return store
        path = self._root / name
        path.mkdir(parents=True, exist_ok=True)
        store = get_data_manager(
            CacheBase("sqlite", sql_url=f"sqlite:///{path / 'cache.db'}", table_name="answers"),
            VectorBase(
                "faiss",
                dimension=self._embedder.dimension,
                index_path=str(path / "faiss.index"),
                top_k=self._top_k,
            ),
            max_size=self._max_entries,
            eviction="LRU",
        )
        self._stores[name] = store
        while len(self._stores) > self._max_stores:
            _, old = self._stores.popitem(last=False)
            self._close_store(old)
        return store

    def _lookup_sync(
        self, model: str, version: str, text: str, threshold: float, ttl_s: float
    ) -> SemanticLookup:
        vec = self._embedder.embed([text])[0]
        store = self._open(model, version)
        found = store.search(vec, top_k=self._top_k) or []
        best: float | None = None
        rejections = 0
        for dist, ident in found:  # ascending distance = descending similarity
            if ident < 0:
                continue
            sim = float(1.0 - float(dist) / 2.0)
            best = sim if best is None else max(best, sim)
            if sim < threshold:
                break
            data = store.get_scalar_data((dist, ident))
            if data is None or not data.answers:
                continue
            question = data.question if isinstance(data.question, str) else data.question.content
            if not compatible(text, question):
                rejections += 1
                continue
            try:
                answer, created_at = codec.decode(base64.b64decode(data.answers[0].answer))
            except (codec.CodecError, ValueError):
                log.warning("corrupt semantic cache entry %s in %s@%s", ident, model, version)
                continue
            if self._clock() - created_at >= ttl_s:
                continue
            store.hit_cache_callback((dist, ident))
            entry = (_store_dirname(model, version, self._embedder), int(ident))
            return SemanticLookup(answer, sim, vec, rejections, entry)
        return SemanticLookup(None, best, vec, rejections)

    def _store_sync(
        self, model: str, version: str, text: str, embedding: np.ndarray | None, payload: bytes
    ) -> None:
        # lazy: gptcache is heavy (faiss, sqlalchemy) and only a semantic tier uses it
        from gptcache.manager.scalar_data.base import Answer, DataType

        vec = embedding if embedding is not None else self._embedder.embed([text])[0]
        store = self._open(model, version)
        answer = Answer(base64.b64encode(payload).decode("ascii"), DataType.STR)
        store.save(text, answer, np.asarray(vec, dtype=np.float32))

    def _close_sync(self) -> None:
        while self._stores:
            _, store = self._stores.popitem(last=False)
            self._close_store(store)

    @staticmethod
    def _close_store(store: Any) -> None:
        try:
            store.close()
        except Exception:
            log.exception("closing a semantic cache store failed")
