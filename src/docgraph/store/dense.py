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

import os
import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from docgraph.model import ScoredRow, Vector
from docgraph.parallel import LazyThreadPool, core_count

# Matrices at least this large are scored in parallel row ranges.
PARALLEL_SCAN_ROWS = 32_768


def scan_threads() -> int:
    """Threads that score one large matrix (``DOCGRAPH_SCAN_THREADS``, default: cores, <= 8);
    read once, when the first large matrix is scored."""
    configured = os.environ.get("DOCGRAPH_SCAN_THREADS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return core_count()


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


class DenseMatrix:
    """Append-only vector matrix with tombstones; thread-safe reads via immutable snapshots."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._lock = threading.Lock()
        self._snap = _Snapshot(
            np.zeros((0, dimension), dtype=np.float32),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int32),
            np.zeros(0, dtype=np.int8),
            np.zeros(0, dtype=bool),
            0,
            0,
        )

    def __len__(self) -> int:
        snap = self._snap
        return snap.n - snap.dead

    @property
    def max_rowid(self) -> int:
        """The highest row id loaded (0 when empty)."""
        snap = self._snap
        return int(snap.rowids[snap.n - 1]) if snap.n else 0

    def append(
        self,
        rowids: npt.NDArray[np.int64],
        namespaces: npt.NDArray[np.int32],
        vectors: Vector,
        kinds: npt.NDArray[np.int8] | None = None,
    ) -> None:
        """Add rows; ``rowids`` must be ascending and above every loaded row id. ``kinds``
        (default all 0) tags each row with its chunk kind code."""
        if kinds is None:
            kinds = np.zeros(len(rowids), dtype=np.int8)
        if len(rowids) == 0:
            return
        with self._lock:
            s = self._snap
            need = s.n + len(rowids)
            if need > len(s.rowids):
                capacity = max(need, 2 * len(s.rowids), 1024)
                grown = _Snapshot(
                    _grow(s.vectors, capacity, s.n),
                    _grow(s.rowids, capacity, s.n),
                    _grow(s.namespaces, capacity, s.n),
                    _grow(s.kinds, capacity, s.n),
                    _grow(s.alive, capacity, s.n),
                    s.n,
                    s.dead,
                )
                s = grown
            s.vectors[s.n:need] = vectors
            s.rowids[s.n:need] = rowids
            s.namespaces[s.n:need] = namespaces
            s.kinds[s.n:need] = kinds
            s.alive[s.n:need] = True
            self._snap = _Snapshot(
                s.vectors, s.rowids, s.namespaces, s.kinds, s.alive, need, s.dead
            )

    def remove(self, rowids: npt.NDArray[np.int64]) -> None:
        """Mark rows dead (unknown row ids are ignored); compacts when a quarter is dead."""
        if len(rowids) == 0:
            return
        with self._lock:
            s = self._snap
            pos = np.searchsorted(s.rowids[: s.n], rowids)
            inside = pos < s.n
            pos, wanted = pos[inside], rowids[inside]
            hit = pos[s.rowids[pos] == wanted]
            newly_dead = int(s.alive[hit].sum())
            s.alive[hit] = False
            dead = s.dead + newly_dead
            if dead > 1024 and dead * 4 > s.n:
                keep = np.flatnonzero(s.alive[: s.n])
                self._snap = _Snapshot(
                    s.vectors[keep].copy(), s.rowids[keep].copy(), s.namespaces[keep].copy(),
                    s.kinds[keep].copy(), np.ones(len(keep), dtype=bool), len(keep), 0,
                )
            else:
                self._snap = _Snapshot(
                    s.vectors, s.rowids, s.namespaces, s.kinds, s.alive, s.n, dead
                )

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
        self, query: Vector, k: int, namespace_ids: list[int], kind: int = 0
    ) -> list[ScoredRow]:
        """Top ``k`` live rows of the given namespaces and chunk kind by cosine similarity."""
        s = self._snap
        if s.n == 0 or k <= 0 or not namespace_ids:
            return []
        scores = matrix_scores(s.vectors[: s.n], query.astype(np.float32))
        allowed = (
            s.alive[: s.n]
            & (s.kinds[: s.n] == kind)
            & np.isin(s.namespaces[: s.n], namespace_ids)
        )
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


def _grow(array: np.ndarray, capacity: int, n: int) -> np.ndarray:
    shape = (capacity, *array.shape[1:])
    out = np.zeros(shape, dtype=array.dtype)
    out[:n] = array[:n]
    return out
