"""A graph ANN index (HNSW, faiss) over the compact dense matrix, beside the catalog.

The compact dense matrix (:mod:`docgraph.store.quantized`) scans every allowed row's signs
per query: linear in the rows (~15 ms at 1M chunks, ~125 ms at 10M). From a row count
(``[store] dense_graph_min_rows``; off by default: at 1M its recall@10 was 0.93, the scan's
1.0) this module gives the scan's first stage a graph instead: an
HNSW index (faiss ``IndexHNSWSQ``, 8-bit scalar codes, inner product of unit vectors)
returns the nearest rows in about a millisecond, and the matrix re-ranks them exactly as
before (int8, then float32 cosines from the catalog), so results carry exact scores.

**Filters stay exact.** The graph holds every row with a vector, of all namespaces and
kinds, labelled ``0..count-1`` (``keys`` maps a label to its chunk row id). A filtered query
(namespaces, kind, the caller's row filter) searches with the allowed labels as a bitmap
selector, so the walk itself skips the rows the caller may not see and returns ``k`` of
them; when the share of allowed rows is below ``GRAPH_MIN_SHARE`` (a selective namespace
or a caller who may read little) the exact scan of the allowed rows is faster and answers
instead; and if the graph and its tail leave fewer than ``k`` allowed rows, so does the scan.

**A cache that follows the catalog.** The graph file is derived from the matrix and rebuilt
when missing, foreign or unreadable; deleting it loses nothing. Rows the graph does not
hold (added after it was written, by this process or another, or a vector that arrived
later) form the *tail*, scanned exactly with every query; rows deleted since stay in the
graph as labels no selector allows (HNSW in faiss has no removal) and the re-scoring reads
vectors from the catalog, where they are gone. Once the tail reaches ``GRAPH_UPDATE_ROWS``
rows, a background thread adds it to a copy of the graph (incremental: the old rows are
not re-inserted); once a quarter of the graph's labels are dead, it builds a new one. The
result is written crash-safely (the graph under a fresh name, then the small descriptor that
names it, by :func:`~docgraph.store.sidecar.write_arrays`) and mapped in place of the old
one. Opening maps the file (``IO_FLAG_MMAP_IFC``): no read of the graph.

Why faiss and not usearch (measured, ``docs/ARCHITECTURE.md``): the same latency and
recall at 100k; the filter inside the walk (usearch's Python API has no predicate); and
usearch 2.26's extension, imported before onnxruntime, made onnxruntime's import crash.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from docgraph.store.ann_cache import BackgroundUpdates, load_faiss
from docgraph.store.sidecar import write_arrays

log = logging.getLogger(__name__)

GRAPH_FORMAT = 1
# Live rows below which no graph is built, when the caller does not say ([store]
# dense_graph_min_rows sets it). Not where the graph stops being faster: at 100k it was
# (dense lane k 100 p50 2.9 vs 7.7 ms, recall@10 0.998 vs 0.999), but it costs a 52 MB file,
# 32 MB of RSS and an 18.5 s build per 100k rows, for a scan already under 10 ms
# (bench/results/graph_ann_100k.json, load ~4).
GRAPH_MIN_ROWS = 250_000
# Share of the live rows a query's filters must allow for the graph to be asked; below it
# the exact scan of the allowed rows is as fast and fills k exactly. Measured at 1M (dense
# k 10, graph and scan alternating, two runs): 1 %: 27.5-32.5 vs 24.0-31.2 ms, 2 %: 20.7-30.0
# vs 31.3-41.4 ms, 5 %: 17.5-30.7 vs 24.0-39.3 ms (bench/results/graph_ann_1m.json).
GRAPH_MIN_SHARE = 0.02
# Rows outside the graph (scanned exactly each query) that trigger a background update.
GRAPH_UPDATE_ROWS = 50_000
CONNECTIVITY = 16  # HNSW "M"
EXPANSION_ADD = 64  # "efConstruction"
EXPANSION_SEARCH = 128  # "efSearch" (at least the neighbours asked for)
# Neighbours asked of the graph, at least: the matrix re-ranks them by their int8 codes
# before the exact re-scoring (the graph's 8-bit distances alone lose near-ties).
GRAPH_CANDIDATES = 400
TRAIN_ROWS = 65_536  # rows the 8-bit scalar quantizer's ranges are trained on
ADD_BATCH = 65_536  # rows added to the graph per call (bounds the float32 copy)


def graph_path(catalog_path: Path) -> Path:
    """The descriptor file of the catalog's graph (row ids, and the graph file it names)."""
    return catalog_path.with_name(catalog_path.name + ".chunk-graph")


@dataclass(frozen=True)
class Graph:
    """One immutable graph: the faiss index (mapped, or in memory if it could not be
    written), the chunk row id of each label, the same sorted, and the file's token."""

    index: Any  # faiss.IndexHNSWSQ (faiss ships no type hints)
    keys: npt.NDArray[np.int64]
    sorted_keys: npt.NDArray[np.int64]
    token: str


class DenseGraph(BackgroundUpdates):
    """The graph of one catalog's dense rows: opened from its file, asked for candidates by
    the matrix, updated in a background thread as the matrix grows or loses rows."""

    what = "chunk graph"

    def __init__(self, catalog_path: Path, dimension: int, catalog_id: str, *,
                 min_rows: int = GRAPH_MIN_ROWS, min_share: float = GRAPH_MIN_SHARE,
                 update_rows: int = GRAPH_UPDATE_ROWS, persist: bool = True) -> None:
        super().__init__(graph_path(catalog_path), dimension, catalog_id, min_rows=min_rows,
                         min_share=min_share, update_rows=update_rows, persist=persist)
        self.graph: Graph | None = None
        # Per row-id array of the matrix (replaced on growth and compaction, appended to
        # otherwise): the tail's positions, and each label's position (-1: gone).
        self._tail: tuple[object, Graph, int, npt.NDArray[np.intp]] | None = None
        self._labels: tuple[object, Graph, npt.NDArray[np.intp]] | None = None

    def _meta(self) -> dict[str, Any]:
        return {"format": GRAPH_FORMAT, "catalog_id": self.catalog_id,
                "dimension": self.dimension, "connectivity": CONNECTIVITY}

    def _file(self, token: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{token}.faiss")

    def open(self, chunk_seq: int) -> str:
        """Map the graph file if it belongs to this catalog; returns how it went (missing,
        foreign, stale: it names rows this catalog never had, corrupt, unavailable: faiss
        is not installed, loaded)."""
        found, meta, arrays = self.read_file(self._meta())
        if found != "read":
            self.status = found
            return self.status
        keys = np.asarray(arrays["keys"], dtype=np.int64)
        if len(keys) and int(keys.max()) > chunk_seq:  # a restored, older catalog
            self.status = "stale"
            return self.status
        token = str(meta["token"])
        try:
            faiss = load_faiss()
        except RuntimeError as exc:
            log.warning("chunk graph not used: %s", exc)
            self.status = "unavailable"
            return self.status
        try:
            index = faiss.read_index(str(self._file(token)),
                                     faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
            if index.ntotal != len(keys) or index.d != self.dimension:
                raise ValueError("graph and row ids do not match")
        except (ValueError, RuntimeError) as exc:
            log.warning("chunk graph ignored: %s: %s", self.path, exc)
            self.status = "corrupt"
            return self.status
        self.graph = Graph(index, keys, np.asarray(arrays["sorted_keys"], dtype=np.int64),
                           token)
        self.status = "loaded"
        return self.status

    def tail(self, rowids: npt.NDArray[np.int64], n: int, g: Graph) -> npt.NDArray[np.intp]:
        """Positions among the snapshot's rows ``[0, n)`` whose row is not in ``g``, kept
        per row-id array and extended as rows are appended."""
        kept = self._tail
        if kept is not None and kept[0] is rowids and kept[1] is g and kept[2] <= n:
            start, known = kept[2], kept[3]
        else:
            start, known = 0, np.zeros(0, dtype=np.intp)
        if start < n:
            part, keys = rowids[start:n], g.sorted_keys
            if len(keys):
                where = np.minimum(np.searchsorted(keys, part), len(keys) - 1)
                missing = np.flatnonzero(keys[where] != part)
            else:
                missing = np.arange(len(part))
            known = np.concatenate([known, missing.astype(np.intp) + start])
            self._tail = (rowids, g, n, known)
        return known

    def label_positions(self, rowids: npt.NDArray[np.int64], n: int,
                        g: Graph) -> npt.NDArray[np.intp]:
        """Each label's position in the snapshot (-1 for rows compacted away), kept per
        row-id array (appends add no label's row: the graph was built from the matrix)."""
        kept = self._labels
        if kept is not None and kept[0] is rowids and kept[1] is g:
            return kept[2]
        where = np.minimum(np.searchsorted(rowids[:n], g.keys), max(n - 1, 0))
        found = rowids[where] == g.keys if n else np.zeros(len(g.keys), dtype=bool)
        labels = np.where(found, where, -1).astype(np.intp)
        self._labels = (rowids, g, labels)
        return labels

    def candidates(self, rowids: npt.NDArray[np.int64], n: int, live: int,
                   allowed: npt.NDArray[np.bool_], allowed_count: int, query: npt.NDArray[
                       np.float32], want: int, k: int,
                   ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]] | None:
        """(positions of the ``want`` nearest allowed rows the graph holds, allowed tail
        positions) for a query, or None when the exact scan must answer it: no graph, too
        few rows, too selective a filter, or fewer than ``k`` allowed rows found."""
        g = self.graph
        if g is None or live < self.min_rows or allowed_count < self.min_share * live:
            return None
        tail = self.tail(rowids, n, g)
        tail = tail[allowed[tail]]
        labels = self.label_positions(rowids, n, g)
        ok = np.zeros(n + 1, dtype=bool)  # the last entry answers for label position -1
        ok[:n] = allowed[:n]
        bitmap = np.packbits(ok[labels], bitorder="little")
        faiss = load_faiss()
        params = faiss.SearchParametersHNSW()
        count = max(want, GRAPH_CANDIDATES)
        params.efSearch = max(EXPANSION_SEARCH, count)
        selector = faiss.IDSelectorBitmap(len(labels), faiss.swig_ptr(bitmap))
        params.sel = selector
        _, found = g.index.search(query[None, :], count, params=params)
        pos = labels[found[0][found[0] >= 0]]
        if len(pos) + len(tail) < min(k, allowed_count):
            return None
        self.answered += 1
        return pos, tail

    def due(self, rowids: npt.NDArray[np.int64], n: int, live: int) -> bool:
        """Whether the graph should be built or updated now: enough live rows, and none
        yet, a long tail, or a quarter of its labels dead."""
        if live < self.min_rows or self.busy() or self.status == "unavailable":
            return False
        g = self.graph
        if g is None:
            return True
        outside = len(self.tail(rowids, n, g))
        dead = len(g.keys) - (live - outside)
        return outside >= self.update_rows or 4 * dead > len(g.keys)

    def update(self, rowids: npt.NDArray[np.int64], alive: npt.NDArray[np.bool_],
               codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], n: int,
               threads: int) -> None:
        """Bring the graph to the matrix's live rows ``[0, n)``: the rows it lacks added to
        an in-memory copy of it, or (none yet, or a quarter of its labels dead) a new graph
        of every live row; then written and mapped in its place."""
        started = time.perf_counter()
        live = np.flatnonzero(alive[:n])
        old = self.graph
        if old is not None:
            dead = len(old.keys) - int(np.isin(old.keys, rowids[live]).sum())
            if 4 * dead > len(old.keys):
                old = None
        try:
            faiss = load_faiss()
        except RuntimeError:
            self.status = "unavailable"  # said once; never tried again by this process
            raise
        faiss.omp_set_num_threads(threads)
        index: Any = None
        if old is not None:
            # a writable copy: read from its file (one copy in memory), or copied when it
            # could not be written (kept in memory); a file deleted meanwhile: rebuilt
            try:
                index = (faiss.read_index(str(self._file(old.token))) if old.token
                         else faiss.deserialize_index(faiss.serialize_index(old.index)))
            except RuntimeError:
                old = None
        if old is None:
            index = faiss.IndexHNSWSQ(self.dimension, faiss.ScalarQuantizer.QT_8bit,
                                      CONNECTIVITY, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = EXPANSION_ADD
            sample = live[np.linspace(0, len(live) - 1, min(len(live), TRAIN_ROWS)).astype(
                np.intp)] if len(live) else live
            index.train(_floats(codes, scales, sample))
            add, keys = live, np.zeros(0, dtype=np.int64)
        else:
            add = live[~np.isin(rowids[live], old.sorted_keys)]
            keys = old.keys
        for start in range(0, len(add), ADD_BATCH):
            index.add(_floats(codes, scales, add[start:start + ADD_BATCH]))
        keys = np.concatenate([keys, rowids[add]]).astype(np.int64)
        graph = Graph(index, keys, np.sort(keys), "")
        try:
            self.check_writable()
            graph = self._write(graph)
        except (OSError, RuntimeError) as exc:  # a read-only folder: keep it in memory
            log.warning("chunk graph kept in memory, not written: %s: %s", self.path, exc)
        self.graph = graph
        self.status = "loaded"
        self.last_build_s = time.perf_counter() - started
        log.info("chunk graph %s: %d rows (%d added) in %.1f s", self.path, len(keys),
                 len(add), self.last_build_s)

    def _write(self, graph: Graph) -> Graph:
        """Write the graph under a fresh name, then the descriptor naming it (the switch is
        the descriptor's atomic rename), remove older graph files, and map the new one."""
        faiss = load_faiss()
        token = secrets.token_hex(8)
        target = self._file(token)
        tmp = target.with_name(target.name + ".tmp")
        try:
            faiss.write_index(graph.index, str(tmp))
            with tmp.open("rb+") as f:
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        meta = {**self._meta(), "token": token}
        write_arrays(self.path, meta, {"keys": graph.keys, "sorted_keys": graph.sorted_keys})
        for other in self.path.parent.glob(self.path.name + ".*.faiss"):
            if other != target:
                other.unlink(missing_ok=True)
        mapped = faiss.read_index(str(target), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        return Graph(mapped, graph.keys, graph.sorted_keys, token)

    def size_bytes(self) -> int:
        """Bytes on disk of the graph file and its descriptor (0 when none)."""
        files = [self.path, *self.path.parent.glob(self.path.name + ".*.faiss")]
        return sum(f.stat().st_size for f in files if f.exists())


def _floats(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32],
            rows: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
    """The rows' vectors as their int8 codes give them back (unit length within ~1e-3)."""
    out: npt.NDArray[np.float32] = codes[rows].astype(np.float32) * scales[rows, None]
    return np.ascontiguousarray(out)
