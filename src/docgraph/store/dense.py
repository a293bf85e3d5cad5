"""Exact dense search over an in-memory matrix of unit vectors, kept in step with the catalog.

The matrix is derived state: it loads from the catalog's ``chunks`` table and follows it by
reading rows with a higher row id (row ids only grow) and the ``chunk_tombstones`` log of
deleted rows. Search scores every live row of the allowed namespaces with one matrix-vector
product, so the namespace filter is applied before ranking, never after.

The product is memory-bound (100k x 384 float32 is 154 MB per query). On a large matrix it
is split into row ranges scored by a small thread pool (numpy releases the GIL), so each
core streams its own part; see ``bench/speed.py`` for the measured effect.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from docgraph.model import ScoredRow, Vector
from docgraph.parallel import LazyThreadPool, scan_threads
from docgraph.store.restricted import RowFilter
from docgraph.store.rows import RowMatrix, in_namespaces

# Matrices at least this large are scored in parallel row ranges.
PARALLEL_SCAN_ROWS = 32_768


SCAN_POOL = LazyThreadPool(scan_threads, "docgraph-scan")


def matrix_scores(vectors: Vector, query: Vector) -> Vector:
    """``vectors @ query``, in parallel row ranges when the matrix is large."""
    n = len(vectors)
    if n < PARALLEL_SCAN_ROWS or (threads := SCAN_POOL.workers) < 2:
        out: Vector = vectors @ query
        return out
    scores = np.empty(n, dtype=np.float32)
    step = -(-n // threads)

    def part(lo: int) -> None:
        np.matmul(vectors[lo:lo + step], query, out=scores[lo:lo + step])

    pool = SCAN_POOL.get()
    for future in [pool.submit(part, lo) for lo in range(0, n, step)]:
        future.result()
    return scores


@dataclass(frozen=True)
class _Snapshot:
    vectors: Vector  # (capacity, dim); rows [0, n) are filled
    rowids: npt.NDArray[np.int64]
    namespaces: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.int8]
    alive: npt.NDArray[np.bool_]
    n: int
    dead: int


class DenseMatrix(RowMatrix[_Snapshot]):
    """Append-only vector matrix with tombstones; thread-safe reads via immutable snapshots
    (bookkeeping in :class:`~docgraph.store.rows.RowMatrix`)."""

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self.dimension = dimension
        self._snap = _Snapshot(
            np.zeros((0, dimension), dtype=np.float32),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int32),
            np.zeros(0, dtype=np.int8),
            np.zeros(0, dtype=bool),
            0,
            0,
        )

    def append(
        self,
        rowids: npt.NDArray[np.int64],
        namespaces: npt.NDArray[np.int32],
        vectors: Vector,
        kinds: npt.NDArray[np.int8] | None = None,
        publish: bool = True,
    ) -> None:
        """Add rows; ``rowids`` must be ascending and above every loaded row id. ``kinds``
        (default all 0) tags each row with its chunk kind code; with ``publish`` false the
        rows wait for :meth:`publish`."""
        self._append(len(rowids), {
            "vectors": vectors, "rowids": rowids, "namespaces": namespaces,
            "kinds": 0 if kinds is None else kinds}, publish)

    def vectors_for(self, rowids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], Vector]:
        """(row ids found alive, their vectors) for the requested row ids, in request order."""
        s = self._snap
        if s.n == 0 or len(rowids) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros((0, self.dimension), dtype=np.float32)
        pos = np.searchsorted(s.rowids[: s.n], rowids)
        pos = np.clip(pos, 0, s.n - 1)
        ok = (s.rowids[pos] == rowids) & s.alive[pos]
        return rowids[ok], s.vectors[pos[ok]]

    def search(
        self, query: Vector, k: int, namespace_ids: list[int], kind: int = 0,
        keep: RowFilter | None = None,
    ) -> list[ScoredRow]:
        """Top ``k`` live rows of the given namespaces and chunk kind by cosine similarity,
        among the rows ``keep`` lets through (all when None)."""
        s = self._snap
        if s.n == 0 or k <= 0 or not namespace_ids:
            return []
        scores = matrix_scores(s.vectors[: s.n], query.astype(np.float32))
        allowed = (
            s.alive[: s.n]
            & (s.kinds[: s.n] == kind)
            & in_namespaces(s.namespaces[: s.n], namespace_ids)
        )
        if keep is not None:
            allowed &= keep(s.rowids, s.n)
        candidates = np.flatnonzero(allowed)
        if len(candidates) == 0:
            return []
        sub = scores[candidates]
        if len(candidates) > k:
            top = np.argpartition(-sub, k - 1)[:k]
        else:
            top = np.arange(len(candidates))
        top = top[np.lexsort((s.rowids[candidates[top]], -sub[top]))]
        return [ScoredRow(int(s.rowids[candidates[i]]), float(sub[i])) for i in top]


