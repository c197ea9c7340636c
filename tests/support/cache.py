"""Cache test kit: a deterministic text embedder (it implements the real ``Embedder``) and a
counting compute callable."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from router.cache import CachedAnswer, Embedder

__all__ = ["BagOfWordsEmbedder", "CountingModel"]


class BagOfWordsEmbedder(Embedder):
    """Deterministic hashed bag of words: texts sharing more words are more similar."""

    @property
    def name(self) -> str:
        return "bag-of-words-64"

    @property
    def dimension(self) -> int:
        return 64

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % 64] += 1.0
            norm = np.linalg.norm(out[i])
            if norm:
                out[i] /= norm
        return out


class CountingModel:
    """A compute callable factory that counts calls and returns a deterministic answer."""

    def __init__(self, *, cacheable: bool = True, size: int = 4) -> None:
        self.calls = 0
        self.cacheable = cacheable
        self.size = size

    def __call__(self, value: float = 1.0):
        async def compute() -> tuple[CachedAnswer, bool]:
            self.calls += 1
            out = np.full(self.size, value, dtype=np.float32)
            return CachedAnswer(
                outputs={"y": out}, served_by="gpu:m@1", version="1"
            ), self.cacheable

        return compute
