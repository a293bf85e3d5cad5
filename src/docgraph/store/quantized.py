"""Compact dense search: sign bits and int8 codes in memory, exact re-scoring from the catalog.

The exact :class:`~docgraph.store.dense.DenseMatrix` holds every vector as float32 (1.5 GB at
a million 384-d chunks, besides the catalog's copy) and scans all of it per query. This
matrix holds, per row, the vector's signs (``dimension / 8`` bytes) and an int8 code with a
per-row scale (``dimension + 4`` bytes): a quarter of the memory. A query runs three stages,
each on fewer rows:

1. **Hamming** distance of the query's signs to every allowed row (the namespace and kind
   pre-filter is applied first, never after), keeping the ``pool`` nearest
   (``max(20 k, 2000)``); skipped when no more rows than that are allowed, so a small or
   selective namespace goes straight to stage 2 with all its rows.
2. **int8** dot products of those rows (error ~1e-3 of a cosine), keeping the
   ``max(2 k, k + 50)`` best.
3. **Exact** float32 cosine of those, with the vectors read from the catalog on demand
   (``fetch``); rows deleted since the last sync are simply absent and dropped.

Results carry exact scores and match exact search whenever the true top ``k`` survive
stages 1 and 2 (measured dense recall@10 in ``bench/backends.py``; tests in
``tests/store/test_store_quantized.py``). Follows the catalog like the exact matrix: appends of
ascending row ids, tombstones, immutable snapshots, compaction at a quarter dead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from docgraph.model import ScoredRow, Vector
from docgraph.parallel import scan_threads
from docgraph.store.dense import PARALLEL_SCAN_ROWS, SCAN_POOL
from docgraph.store.dense_lists import DenseLists
from docgraph.store.graph_ann import DenseGraph
from docgraph.store.matching import MatchingRows
from docgraph.store.restricted import RowFilter
from docgraph.store.rows import RowMatrix

# Reads the exact float32 vectors of row ids: (row ids found, (len(found), dim) matrix).
VectorFetch = Callable[[npt.NDArray[np.int64]], tuple[npt.NDArray[np.int64], Vector]]

MIN_POOL = 2000  # rows kept by the Hamming stage, at least
POOL_PER_K = 20
MIN_RESCORE_EXTRA = 50  # rows re-scored exactly beyond k, at least
# A selective filter's pool is widened while its best SIGN_TOP (or k, if fewer) lie this
# close (bits) to its edge: the top 10 are what a caller reads first; asked for 100 (the
# hybrid's depth), widening for the 100th would score every allowed row.
SIGN_MARGIN = 8
SIGN_TOP = 10
APPROX_BLOCK = 2048  # rows whose int8 codes are scored at once
HAMMING_BLOCK = 16_384  # rows per step of the Hamming scan (temporaries of ~1 MB)
NOT_ALLOWED = np.iinfo(np.uint16).max  # the distance of a row the filter excludes
# Namespace/kind masks kept per snapshot (a few callers' namespace sets; 1 MB each at 1M).
KEPT_MASKS = 16


def sign_words(vectors: Vector) -> npt.NDArray[np.uint64]:
    """The signs of each row packed into 64-bit words (padded with zero bits)."""
    packed = np.packbits(np.asarray(vectors) > 0, axis=1)
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def int8_codes(vectors: Vector) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32]]:
    """Per-row symmetric int8 codes and scales: ``vector ~= code * scale``."""
    v = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(v).max(axis=1) if v.shape[1] else np.zeros(len(v), dtype=np.float32)
    scale = (peak / 127.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0).astype(np.float32)
    codes = np.clip(np.rint(v / safe[:, None]), -127, 127).astype(np.int8)
    return codes, scale


def hamming(words: npt.NDArray[np.uint64], query: npt.NDArray[np.uint64],
            allowed: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.uint16]:
    """Bits differing between each row of ``words`` and ``query`` (``NOT_ALLOWED`` for rows
    where ``allowed`` is false), in blocks of ``HAMMING_BLOCK`` rows so the temporaries
    stay in cache, and in parallel row ranges when there are many rows."""
    n = len(words)
    result = np.empty(n, dtype=np.uint16)

    def count(lo: int, hi: int) -> None:
        for start in range(lo, hi, HAMMING_BLOCK):
            stop = min(hi, start + HAMMING_BLOCK)
            bits = np.bitwise_count(words[start:stop] ^ query)
            out = result[start:stop]
            out[:] = bits[:, 0]
            for j in range(1, bits.shape[1]):
                out += bits[:, j]
            if allowed is not None:
                np.putmask(out, ~allowed[start:stop], NOT_ALLOWED)

    if n < PARALLEL_SCAN_ROWS or (threads := SCAN_POOL.workers) < 2:
        count(0, n)
        return result
    step = -(-n // threads)
    pool = SCAN_POOL.get()
    for future in [pool.submit(count, lo, min(n, lo + step)) for lo in range(0, n, step)]:
        future.result()
    return result


def nearest(distances: npt.NDArray[np.uint16], count: int) -> npt.NDArray[np.intp]:
    """Positions of the ``count`` smallest distances (``count`` < ``len(distances)``), ties at
    the cut broken by position. Distances are small integers (bits), so a histogram finds the
    cut and one comparison selects: several times faster than ``argpartition`` over a
    million rows, and deterministic among ties."""
    cut = int(np.searchsorted(np.cumsum(np.bincount(distances)), count))
    keep = np.flatnonzero(distances <= cut)
    if len(keep) > count:
        ties = np.flatnonzero(distances[keep] == cut)
        keep = np.delete(keep, ties[count - (len(keep) - len(ties)):])
    return keep


def _approx(s: _Snapshot, rows: npt.NDArray[np.intp], q: npt.NDArray[np.float32]
            ) -> npt.NDArray[np.float32]:
    """The int8 codes' cosine estimate of ``rows`` against ``q``, in blocks of
    ``APPROX_BLOCK`` rows (a block's float copy stays in cache: 32k rows at once took 1.7x
    as long)."""
    if len(rows) <= APPROX_BLOCK:
        out: npt.NDArray[np.float32] = (s.codes[rows].astype(np.float32) @ q) * s.scales[rows]
        return out
    out = np.empty(len(rows), np.float32)
    for start in range(0, len(rows), APPROX_BLOCK):
        block = rows[start:start + APPROX_BLOCK]
        out[start:start + len(block)] = s.codes[block].astype(np.float32) @ q
    out *= s.scales[rows]
    return out


@dataclass(frozen=True)
class _Snapshot:
    words: npt.NDArray[np.uint64]  # (capacity, words per row); rows [0, n) are filled
    codes: npt.NDArray[np.int8]  # (capacity, dim)
    scales: npt.NDArray[np.float32]
    rowids: npt.NDArray[np.int64]
    namespaces: npt.NDArray[np.int32]
    kinds: npt.NDArray[np.int8]
    alive: npt.NDArray[np.bool_]
    n: int
    dead: int


class QuantizedDenseMatrix(RowMatrix[_Snapshot]):
    """Append-only sign + int8 matrix with tombstones and exact re-scoring through ``fetch``;
    thread-safe reads via immutable snapshots (the interface of ``DenseMatrix``; bookkeeping
    in :class:`~docgraph.store.rows.RowMatrix`)."""

    growth = 1.5  # the arrays are a quarter of float32's: grow by less than the exact matrix

    def __init__(
        self, dimension: int, fetch: VectorFetch, min_pool: int = MIN_POOL,
        pool_per_k: int = POOL_PER_K,
    ) -> None:
        self.dimension = dimension
        self.fetch = fetch
        self.min_pool = min_pool
        self.pool_per_k = pool_per_k
        # Above its row threshold, stage 1 asks this graph or partition instead of scanning
        # every row (docgraph.store.graph_ann, docgraph.store.dense_lists); None: the scan.
        self.graph: DenseGraph | DenseLists | None = None
        self._masks = MatchingRows(KEPT_MASKS)  # per snapshot and filter: its live rows
        super().__init__()
        width = -(-dimension // 64)
        self._snap = _Snapshot(
            np.zeros((0, width), dtype=np.uint64),
            np.zeros((0, dimension), dtype=np.int8),
            np.zeros(0, dtype=np.float32),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int32),
            np.zeros(0, dtype=np.int8),
            np.zeros(0, dtype=bool),
            0,
            0,
        )

    @property
    def nbytes(self) -> int:
        """Bytes held by the matrix's arrays (capacity included)."""
        s = self._snap
        return sum(getattr(s, k).nbytes for k in self._array_names())

    def append(
        self,
        rowids: npt.NDArray[np.int64],
        namespaces: npt.NDArray[np.int32],
        vectors: Vector,
        kinds: npt.NDArray[np.int8] | None = None,
        publish: bool = True,
    ) -> None:
        """Add rows (quantized here); ``rowids`` must be ascending and above every loaded
        row id. ``kinds`` (default all 0) tags each row with its chunk kind code; with
        ``publish`` false the rows wait for :meth:`publish`."""
        codes, scales = int8_codes(vectors)
        self.append_codes(rowids, namespaces, sign_words(vectors), codes, scales, kinds,
                          publish)

    def append_codes(
        self,
        rowids: npt.NDArray[np.int64],
        namespaces: npt.NDArray[np.int32],
        words: npt.NDArray[np.uint64],
        codes: npt.NDArray[np.int8],
        scales: npt.NDArray[np.float32],
        kinds: npt.NDArray[np.int8] | None = None,
        publish: bool = True,
    ) -> None:
        """Add rows already quantized (by :func:`sign_words` and :func:`int8_codes`), all
        visible to searches at once (now, or at :meth:`publish` when ``publish`` is
        false)."""
        self._append(len(rowids), {
            "words": words, "codes": codes, "scales": scales, "rowids": rowids,
            "namespaces": namespaces, "kinds": 0 if kinds is None else kinds}, publish)

    def search(
        self, query: Vector, k: int, namespace_ids: list[int], kind: int = 0,
        fetch: VectorFetch | None = None, keep: RowFilter | None = None,
    ) -> list[ScoredRow]:
        """Top ``k`` live rows of the given namespaces and chunk kind by cosine similarity
        (candidates by signs and int8 codes, scores exact from ``fetch``, by default the
        reader the matrix was made with), among the rows ``keep`` lets through (all when
        None)."""
        s = self._snap
        if s.n == 0 or k <= 0 or not namespace_ids:
            return []
        q = np.asarray(query, dtype=np.float32)
        allowed, allowed_count = self._allowed(s, namespace_ids, kind)
        if keep is not None:
            allowed = allowed & keep(s.rowids, s.n)
            allowed_count = int(np.count_nonzero(allowed))
        if allowed_count == 0:
            return []
        pool = max(self.pool_per_k * k, self.min_pool)
        rescore = max(2 * k, k + MIN_RESCORE_EXTRA)
        near, approx = None, None
        if self.graph is not None and allowed_count > pool:
            near = self.graph.candidates(s.rowids, s.n, s.n - s.dead, allowed, allowed_count,
                                         q, rescore, k)
        if near is not None:  # the graph's (lists') allowed rows and the rows it lacks
            graph_rows, tail = near
            qwords = sign_words(q[None, :])[0]
            if len(graph_rows) > pool and isinstance(self.graph, DenseLists):
                # lists are read whole: cut by signs as the scan does (a graph's rows are
                # already its nearest)
                graph_rows = graph_rows[nearest(hamming(s.words[graph_rows], qwords), pool)]
            if len(tail) > pool:
                tail = tail[nearest(hamming(s.words[tail], qwords), pool)]
            candidates = np.concatenate([graph_rows, tail])
        elif allowed_count <= pool:
            candidates = np.flatnonzero(allowed)
        elif 4 * allowed_count < s.n:  # a selective filter: gather its rows' signs
            candidates, approx = self._selective(s, q, k, np.flatnonzero(allowed), pool)
        else:  # most rows allowed: scan them all, the others at the largest distance
            qwords = sign_words(q[None, :])[0]
            candidates = nearest(hamming(s.words[: s.n], qwords, allowed), pool)
        if approx is None:
            approx = _approx(s, candidates, q)
        if len(candidates) > rescore:
            candidates = candidates[np.argpartition(-approx, rescore - 1)[:rescore]]
        found, vectors = (fetch or self.fetch)(np.sort(s.rowids[candidates]))
        if len(found) == 0:
            return []
        exact = vectors.astype(np.float32) @ q
        order = np.lexsort((found, -exact))[:k]
        return [ScoredRow(int(found[i]), float(exact[i])) for i in order]

    @staticmethod
    def _selective(s: _Snapshot, q: npt.NDArray[np.float32], k: int,
                   rows: npt.NDArray[np.intp], pool: int
                   ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float32]]:
        """Candidates among ``rows`` (a selective filter's, more than ``pool``) by their signs,
        with their int8 scores, in row order. The pool is doubled (up to every row, each row
        scored once) while the ``SIGN_TOP`` (or ``k``) best by int8 score lie within
        ``SIGN_MARGIN`` bits of the pool's edge, where a row past the edge may be as near: in
        a small namespace the nearest can be far from the query, and signs rank far rows
        poorly (a 1 % namespace at 10M lost 1 row in 10 to a fixed pool of 2,000)."""
        distances = hamming(s.words[rows], sign_words(q[None, :])[0])
        near = nearest(distances, pool)  # in row order
        approx = _approx(s, rows[near], q)
        order: npt.NDArray[np.intp] | None = None
        scored, done = [approx], pool
        while True:
            ranked = order[:done] if order is not None else near
            top = min(k, SIGN_TOP)
            best = ranked[np.argpartition(-approx, top - 1)[:top]]
            edge = int(distances[near].max() if order is None else distances[order[done - 1]])
            if edge - int(distances[best].max()) >= SIGN_MARGIN:
                break
            if order is None:  # widened: the rest by distance (the first pool is ``near``)
                order = np.argsort(distances, kind="stable")
                order[:pool] = near
            stop = min(len(rows), 2 * done)
            scored.append(_approx(s, rows[order[done:stop]], q))
            approx, done = np.concatenate(scored), stop
            if done == len(rows):
                break
        if order is None:
            return rows[near], approx
        by_row = np.argsort(order[:done])
        return rows[order[:done][by_row]], approx[by_row]

    def _allowed(self, s: _Snapshot, namespace_ids: list[int], kind: int
                 ) -> tuple[npt.NDArray[np.bool_], int]:
        """The snapshot's live rows of these namespaces and kind, and their count: computed
        once per snapshot and filter (a query of a partition then costs the lists it reads,
        not a pass over every row; the scan saves the pass too). The mask is shared: never
        written to."""
        return self._masks.allowed(s, namespace_ids, kind)

    def ann_state(self) -> str | None:
        """How the graph or partition answers now (:meth:`BackgroundUpdates.state
        <docgraph.store.ann_cache.BackgroundUpdates.state>`); None without one."""
        s = self._snap
        return None if self.graph is None else self.graph.state(s.n - s.dead)

    def maintain_graph(self) -> None:
        """Start a background update of the graph when it is due (enough live rows, and no
        graph yet, a long tail of rows it lacks, or many of its rows deleted), on all cores
        but one (searches keep one)."""
        graph, s = self.graph, self._snap
        if graph is not None and graph.due(s.rowids, s.n, s.n - s.dead):
            graph.start_update(s.rowids, s.alive.copy(), s.codes, s.scales, s.n,
                               max(1, scan_threads() - 1))


