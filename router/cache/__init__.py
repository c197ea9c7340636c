"""Result cache of the request pipeline: in-process LRU → Redis exact → GPTCache semantic.

The pipeline makes one call per request::

    cache = ResultCache(CacheSettings(redis_url="redis://127.0.0.1:6379/0"), on_event=alert)
    answer, outcome = await cache.get_or_compute(
        model="digits", version="3", inputs=request.inputs, text=request.text,
        policy=model_config.cache, control=request.cache, compute=run_model,
    )
    response.cache, response.similarity = outcome.tier, outcome.similarity
"""

from router.cache.embedder import Embedder, MiniLMEmbedder, SharedEmbedder
from router.cache.facade import Compute, ResultCache
from router.cache.types import Answer, CachedAnswer, CacheOutcome, CacheSettings, CacheTier

__all__ = [
    "Answer",
    "CacheOutcome",
    "CacheSettings",
    "CacheTier",
    "CachedAnswer",
    "Compute",
    "Embedder",
    "MiniLMEmbedder",
    "ResultCache",
    "SharedEmbedder",
]
