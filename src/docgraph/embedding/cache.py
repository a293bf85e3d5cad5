"""A persistent embedding cache keyed by (model name, content hash of the embedded text).

Wrapping an embedder in :class:`CachedEmbedder` makes re-embedding identical text free across
index rebuilds and benchmark reruns. Queries are not cached.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from docgraph.embedding.embedders import Embedder
from docgraph.model import Vector
from docgraph.text import text_hash


class CachedEmbedder:
    """An :class:`Embedder` that stores every passage vector it computes in a SQLite file.

    ``misses`` counts passages actually sent to the wrapped model (useful to assert that a
    rerun embedded nothing).
    """

    def __init__(self, inner: Embedder, cache_path: str | Path) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.max_tokens = inner.max_tokens
        self.misses = 0
        Path(cache_path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(cache_path), check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS embeddings ("
            " model TEXT NOT NULL, hash TEXT NOT NULL, vector BLOB NOT NULL,"
            " PRIMARY KEY (model, hash))"
        )
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> Vector:
        """Vectors from the cache where present; the rest from the model (then cached)."""
        hashes = [text_hash(t) for t in texts]
        found: dict[str, bytes] = {}
        with self._lock:
            for start in range(0, len(hashes), 500):
                part = list(dict.fromkeys(hashes[start:start + 500]))
                marks = ",".join("?" * len(part))
                found.update(self._db.execute(
                    f"SELECT hash, vector FROM embeddings WHERE model = ? AND hash IN ({marks})",
                    [self.name, *part],
                ).fetchall())
        missing = list(dict.fromkeys(h for h in hashes if h not in found))
        if missing:
            first_text = {h: t for h, t in zip(hashes, texts, strict=True)}
            vectors = self.inner.embed_documents([first_text[h] for h in missing])
            self.misses += len(missing)
            with self._lock, self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                    [(self.name, h, v.astype(np.float32).tobytes())
                     for h, v in zip(missing, vectors, strict=True)],
                )
            for h, v in zip(missing, vectors, strict=True):
                found[h] = v.astype(np.float32).tobytes()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([np.frombuffer(found[h], dtype=np.float32) for h in hashes])

    def embed_query(self, text: str) -> Vector:
        """Queries go straight to the model."""
        return self.inner.embed_query(text)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Delegates to the wrapped model's tokenizer."""
        return self.inner.count_tokens(texts)

    def token_counter(self) -> Callable[[Sequence[str]], list[int]] | None:
        """The wrapped model's portable token counter, if it has one."""
        factory = getattr(self.inner, "token_counter", None)
        return factory() if callable(factory) else None

    def close(self) -> None:
        """Close the cache file."""
        self._db.close()
