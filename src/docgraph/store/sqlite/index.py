"""The embedded chunk index: exact dense search and BM25 posting lists, in memory,
following the SQLite catalog (row ids + tombstones)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

import numpy as np

from docgraph.errors import StoreError
from docgraph.model import CHUNK_KINDS, ChunkKind, ScoredRow, Vector
from docgraph.store.base import require_namespaces
from docgraph.store.dense import DenseMatrix
from docgraph.store.lexical import PostingIndex, query_terms
from docgraph.store.lexical import term_ids as stored_term_ids
from docgraph.store.sqlite.catalog import SQLiteCatalog


class EmbeddedChunkIndex:
    """Dense (exact, in-memory matrix) + lexical (BM25 posting lists in memory, see
    :mod:`docgraph.store.lexical`) search over a :class:`SQLiteCatalog`.

    Both follow the catalog lazily: each search first applies rows added and deleted since
    the last one (cheap when nothing changed), so writes from another process (a CLI build
    while a server runs) become visible on the next query.
    """

    def __init__(self, catalog: SQLiteCatalog, dimension: int) -> None:
        self.catalog = catalog
        self.dense = DenseMatrix(dimension)
        self.postings = PostingIndex()
        self._tombstone_seq = 0
        self._sync_lock = threading.Lock()
        self._synced_marks: tuple[int, int] | None = None
        _limit_blas_threads()
        self.sync()

    def _marks(self, db: sqlite3.Connection) -> tuple[int, int]:
        rows = dict(db.execute(
            "SELECT name, seq FROM sqlite_sequence WHERE name IN ('chunks', 'chunk_tombstones')"
        ).fetchall())
        return int(rows.get("chunks", 0)), int(rows.get("chunk_tombstones", 0))

    def sync(self) -> None:
        """Apply catalog changes since the last sync to the dense matrix and posting lists."""
        db = self.catalog.connection()
        if self._synced_marks is not None and self._marks(db) == self._synced_marks:
            return
        with self._sync_lock:
            db.execute("BEGIN")
            try:
                marks = self._marks(db)
                if marks == self._synced_marks:
                    return
                rows = db.execute(
                    "SELECT id, namespace_id, vector, kind, terms, term_count FROM chunks"
                    " WHERE id > ? ORDER BY id",
                    (self.dense.max_rowid,),
                ).fetchall()
                dead = db.execute(
                    "SELECT seq, chunk_id FROM chunk_tombstones WHERE seq > ? ORDER BY seq",
                    (self._tombstone_seq,),
                ).fetchall()
            finally:
                db.execute("COMMIT")
            if rows:
                dim = self.dense.dimension
                vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
                if vectors.size != len(rows) * dim:
                    raise StoreError(
                        f"{self.catalog.path}: stored vectors do not have dimension {dim}"
                    )
                rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
                namespaces = np.fromiter((r[1] for r in rows), dtype=np.int32, count=len(rows))
                kinds = np.fromiter((CHUNK_KINDS.index(r[3]) for r in rows), dtype=np.int8,
                                    count=len(rows))
                self.dense.append(rowids, namespaces, vectors.reshape(len(rows), dim), kinds)
                self.postings.append(
                    rowids, namespaces, kinds, [r[4] for r in rows],
                    np.fromiter((r[5] for r in rows), dtype=np.float32, count=len(rows)),
                )
            if dead:
                removed = np.array(sorted(r[1] for r in dead), dtype=np.int64)
                self.dense.remove(removed)
                self.postings.remove(removed)
                self._tombstone_seq = int(dead[-1][0])
            self._synced_marks = marks

    def __len__(self) -> int:
        """Live chunks loaded (all namespaces and kinds)."""
        return len(self.dense)

    def _term_ids(self, text: str) -> list[int]:
        terms = query_terms(text)
        if not terms:
            return []
        found = stored_term_ids(self.catalog.connection(), terms)
        return [found[t] for t in terms if t in found]

    def lexical_scores(
        self, text: str, rowids: Sequence[int], namespaces: frozenset[str]
    ) -> dict[int, float]:
        """BM25 scores of ``text`` for the given chunks only (absent: no term matched)."""
        ns_ids = self._namespace_ids(namespaces)
        ids = np.array(list(dict.fromkeys(int(r) for r in rowids)), dtype=np.int64)
        if not ns_ids or len(ids) == 0:
            return {}
        self.sync()
        term_ids = self._term_ids(text)
        if not term_ids:
            return {}
        return self.postings.scores_for(term_ids, ids, ns_ids)

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks (as loaded in the dense matrix)."""
        self.sync()
        found, vectors = self.dense.vectors_for(np.asarray(list(rowids), dtype=np.int64))
        return {int(r): v for r, v in zip(found, vectors, strict=True)}

    def _namespace_ids(self, namespaces: frozenset[str]) -> list[int]:
        return list(self.catalog.namespace_ids(require_namespaces(namespaces)).values())

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of the allowed namespaces by cosine similarity (exact)."""
        ns_ids = self._namespace_ids(namespaces)
        self.sync()
        return self.dense.search(vector, k, ns_ids, CHUNK_KINDS.index(kind))

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of the allowed namespaces by BM25 over breadcrumb + text."""
        ns_ids = self._namespace_ids(namespaces)
        if not ns_ids or k <= 0:
            return []
        self.sync()
        term_ids = self._term_ids(text)
        if not term_ids:
            return []
        return [ScoredRow(rowid, score) for rowid, score in
                self.postings.search(term_ids, k, ns_ids, CHUNK_KINDS.index(kind))]



_blas_limited = False


def _limit_blas_threads() -> None:
    """Single-query matrix-vector products run fastest on one BLAS thread (measured ~10x on
    2 shared cores); set once per process."""
    global _blas_limited
    if not _blas_limited:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True
