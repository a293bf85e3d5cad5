"""The embedded chunk index: dense search (compact codes re-scored exactly, or an exact
float32 matrix) and BM25 posting lists, in memory, following the SQLite catalog (row ids +
tombstones)."""

from __future__ import annotations

import ctypes
import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from docgraph.errors import StoreError
from docgraph.model import CHUNK_KINDS, ChunkKind, ScoredRow, Vector
from docgraph.store.base import require_namespaces
from docgraph.store.dense import DenseMatrix
from docgraph.store.lexical import PostingIndex, query_terms
from docgraph.store.lexical import term_ids as stored_term_ids
from docgraph.store.quantized import QuantizedDenseMatrix, int8_codes, sign_words
from docgraph.store.sqlite.catalog import SQLiteCatalog

# Rows read (and quantized) per step when following the catalog: bounds the transient memory
# of opening a large index to this many float32 vectors.
SYNC_BATCH_ROWS = 32_768
# After loading at least this many rows, hand the freed heap back to the system.
TRIM_AFTER_ROWS = 10_000


def release_free_heap() -> None:
    """Return freed heap memory to the system (glibc ``malloc_trim``; elsewhere nothing).

    Loading many rows allocates and frees their bytes objects and batch arrays; glibc keeps
    that memory mapped (a third of the RSS after opening 100k chunks, measured: 328 MB ->
    189 MB) until told otherwise."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


class EmbeddedChunkIndex:
    """Dense (sign + int8 codes in memory, exact re-scoring from the catalog, see
    :mod:`docgraph.store.quantized`; or, with ``exact``, an in-memory float32 matrix) +
    lexical (BM25 posting lists in memory, see :mod:`docgraph.store.lexical`) search over a
    :class:`SQLiteCatalog`.

    Both follow the catalog lazily: each search first applies rows added and deleted since
    the last one (cheap when nothing changed), so writes from another process (a CLI build
    while a server runs) become visible on the next query.
    """

    def __init__(self, catalog: SQLiteCatalog, dimension: int, exact: bool = False) -> None:
        self.catalog = catalog
        self.dimension = dimension
        self.exact = exact
        self.dense: DenseMatrix | QuantizedDenseMatrix = (
            DenseMatrix(dimension) if exact
            else QuantizedDenseMatrix(dimension, self._stored_vectors)
        )
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
                cursor = db.execute(
                    "SELECT id, namespace_id, vector, kind, terms, term_count FROM chunks"
                    " WHERE id > ? ORDER BY id",
                    (self.dense.max_rowid,),
                )
                parts: list[_RowBatch] = []
                while batch := cursor.fetchmany(SYNC_BATCH_ROWS):
                    parts.append(self._read_batch(batch))
                dead = db.execute(
                    "SELECT seq, chunk_id FROM chunk_tombstones WHERE seq > ? ORDER BY seq",
                    (self._tombstone_seq,),
                ).fetchall()
            finally:
                db.execute("COMMIT")
            if parts:
                rowids = np.concatenate([p.rowids for p in parts])
                namespaces = np.concatenate([p.namespaces for p in parts])
                kinds = np.concatenate([p.kinds for p in parts])
                if isinstance(self.dense, QuantizedDenseMatrix):
                    self.dense.append_codes(
                        rowids, namespaces,
                        np.concatenate([p.words for p in parts]),
                        np.concatenate([p.codes for p in parts]),
                        np.concatenate([p.scales for p in parts]),
                        kinds,
                    )
                else:
                    self.dense.append(
                        rowids, namespaces, np.concatenate([p.vectors for p in parts]), kinds
                    )
                self.postings.append(
                    rowids, namespaces, kinds, [t for p in parts for t in p.terms],
                    np.concatenate([p.term_counts for p in parts]),
                )
            loaded = sum(len(p.rowids) for p in parts)
            parts.clear()
            if not self.exact and loaded >= TRIM_AFTER_ROWS:
                release_free_heap()
            if dead:
                removed = np.array(sorted(r[1] for r in dead), dtype=np.int64)
                self.dense.remove(removed)
                self.postings.remove(removed)
                self._tombstone_seq = int(dead[-1][0])
            self._synced_marks = marks

    def _read_batch(self, rows: list[tuple[int, int, bytes, str, bytes, float]]) -> _RowBatch:
        """Arrays of one batch of chunk rows; vectors quantized at once unless exact."""
        dim = self.dimension
        vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        if vectors.size != len(rows) * dim:
            raise StoreError(f"{self.catalog.path}: stored vectors do not have dimension {dim}")
        matrix = vectors.reshape(len(rows), dim)
        batch = _RowBatch(
            rowids=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
            namespaces=np.fromiter((r[1] for r in rows), dtype=np.int32, count=len(rows)),
            kinds=np.fromiter((CHUNK_KINDS.index(r[3]) for r in rows), dtype=np.int8,
                              count=len(rows)),
            terms=[r[4] for r in rows],
            term_counts=np.fromiter((r[5] for r in rows), dtype=np.float32, count=len(rows)),
        )
        if self.exact:
            batch.vectors = matrix
        else:
            batch.words = sign_words(matrix)
            batch.codes, batch.scales = int8_codes(matrix)
        return batch

    def _stored_vectors(
        self, rowids: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], Vector]:
        """The catalog's float32 vectors of the given chunks (deleted ones absent)."""
        dim = self.dimension
        ids = [int(r) for r in rowids]
        found: list[int] = []
        blobs: list[bytes] = []
        db = self.catalog.connection()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for rowid, blob in db.execute(
                f"SELECT id, vector FROM chunks WHERE id IN ({','.join('?' * len(part))})", part
            ):
                found.append(int(rowid))
                blobs.append(blob)
        vectors = np.frombuffer(b"".join(blobs), dtype=np.float32)
        if vectors.size != len(found) * dim:
            raise StoreError(f"{self.catalog.path}: stored vectors do not have dimension {dim}")
        return np.array(found, dtype=np.int64), vectors.reshape(len(found), dim)

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
        self, text: str, rowids: Sequence[int], namespaces: frozenset[str],
        kind: ChunkKind = "text",
    ) -> dict[int, float]:
        """BM25 scores of ``text`` for the given chunks of ``kind`` only, scored with that
        kind's statistics (absent: no term matched, or another kind)."""
        ns_ids = self._namespace_ids(namespaces)
        ids = np.array(list(dict.fromkeys(int(r) for r in rowids)), dtype=np.int64)
        if not ns_ids or len(ids) == 0:
            return {}
        self.sync()
        term_ids = self._term_ids(text)
        if not term_ids:
            return {}
        return self.postings.scores_for(term_ids, ids, ns_ids, CHUNK_KINDS.index(kind))

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks (deleted ones absent): from the dense matrix when
        exact, else read from the catalog."""
        self.sync()
        ids = np.asarray(list(dict.fromkeys(int(r) for r in rowids)), dtype=np.int64)
        if isinstance(self.dense, DenseMatrix):
            found, vectors = self.dense.vectors_for(ids)
        else:
            found, vectors = self._stored_vectors(ids)
        return {int(r): v for r, v in zip(found, vectors, strict=True)}

    def _namespace_ids(self, namespaces: frozenset[str]) -> list[int]:
        return list(self.catalog.namespace_ids(require_namespaces(namespaces)).values())

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of the allowed namespaces by cosine similarity (exact scores;
        candidates by compact codes unless the index is ``exact``)."""
        ns_ids = self._namespace_ids(namespaces)
        self.sync()
        return self.dense.search(vector, k, ns_ids, CHUNK_KINDS.index(kind))

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of ``kind`` in the allowed namespaces by BM25 over breadcrumb +
        text, scored with the statistics of ``kind``'s live chunks only."""
        ns_ids = self._namespace_ids(namespaces)
        if not ns_ids or k <= 0:
            return []
        self.sync()
        term_ids = self._term_ids(text)
        if not term_ids:
            return []
        return [ScoredRow(rowid, score) for rowid, score in
                self.postings.search(term_ids, k, ns_ids, CHUNK_KINDS.index(kind))]


@dataclass
class _RowBatch:
    """One batch of chunk rows read while following the catalog."""

    rowids: npt.NDArray[np.int64]
    namespaces: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.int8]
    terms: list[bytes]
    term_counts: npt.NDArray[np.float32]
    vectors: Vector = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    words: npt.NDArray[np.uint64] = field(default_factory=lambda: np.zeros((0, 0), np.uint64))
    codes: npt.NDArray[np.int8] = field(default_factory=lambda: np.zeros((0, 0), np.int8))
    scales: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))


_blas_limited = False


def _limit_blas_threads() -> None:
    """Single-query matrix-vector products run fastest on one BLAS thread (measured ~10x on
    2 shared cores); set once per process."""
    global _blas_limited
    if not _blas_limited:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True
