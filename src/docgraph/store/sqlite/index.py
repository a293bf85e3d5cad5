"""The embedded chunk index: dense search (compact codes re-scored exactly, or an exact
float32 matrix) and BM25 posting lists, in memory, following the SQLite catalog (row ids +
tombstones)."""

from __future__ import annotations

import ctypes
import logging
import sqlite3
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from docgraph.errors import StoreError
from docgraph.languages import query_terms_for
from docgraph.model import CHUNK_KINDS, ChunkKind, ScoredRow, Vector
from docgraph.store.base import require_namespaces
from docgraph.store.dense import DenseMatrix
from docgraph.store.dense_lists import DenseLists
from docgraph.store.graph_ann import DenseGraph
from docgraph.store.lexical import APPENDABLE, PostingIndex
from docgraph.store.lexical import term_ids as stored_term_ids
from docgraph.store.quantized import QuantizedDenseMatrix
from docgraph.store.restricted import RestrictedRows
from docgraph.store.sidecar import SidecarError, read_arrays, write_arrays
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.query_view import EmbeddedQueryView
from docgraph.store.sqlite.row_batch import RowBatch, read_row_batch, stored_vectors
from docgraph.store.sqlite.schema import SCHEMA_VERSION

log = logging.getLogger(__name__)

# Rows read (and quantized) per step when following the catalog: bounds the transient memory
# of opening a large index to this many float32 vectors.
SYNC_BATCH_ROWS = 32_768
# A load of at least this many rows is logged (it takes seconds: ~10 s a million rows).
LARGE_LOAD_ROWS = 200_000
# After loading at least this many rows, hand the freed heap back to the system.
TRIM_AFTER_ROWS = 10_000
# Rewrite the sidecar once this many rows were read from the catalog since it was written
# (or since opening, when there was none): re-reading fewer costs an open well under a
# second, writing the file costs seconds at a million rows.
SIDECAR_AFTER_ROWS = 50_000
# Version of the sidecar's contents (bump when the arrays or their meaning change).
# 2: BM25 statistics per chunk kind; 3: room after appendable arrays; 4: BM25 term bounds
SIDECAR_FORMAT = 4
# Room left after each appendable sidecar array, as a share of its rows (at least the
# minimum): a hole in the file, so it costs no disk; rows a server indexes after mapping
# the sidecar fill it in place instead of copying the arrays into memory (27 s and 7.7 GB
# on the first write after opening 10M chunks, measured before).
SIDECAR_ROOM = 0.25
SIDECAR_ROOM_MIN = 65_536


def _with_room(rows: int) -> int:
    """Rows of room a sidecar array of ``rows`` rows gets for later appends."""
    return rows + max(SIDECAR_ROOM_MIN, int(rows * SIDECAR_ROOM))


def sidecar_path(catalog_path: Path) -> Path:
    """The file beside the catalog that persists the index's in-memory arrays."""
    return catalog_path.with_name(catalog_path.name + ".chunk-index")


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

    Both follow the catalog lazily: each query first applies rows added and deleted since
    the last one (cheap when nothing changed: one read of ``sqlite_sequence``), so writes
    from another process (a CLI build while a server runs) become visible on the next query.
    A query is :meth:`for_query` (the cohort and hybrid searchers take one and search
    through it); each of this class's own search methods is a query of its own. From
    ``graph_min_rows`` live rows the dense lane's candidates come from an ANN cache beside
    the catalog, ``ann`` "lists" (:mod:`docgraph.store.dense_lists`) or "hnsw"
    (:mod:`docgraph.store.graph_ann`). With ``write_caches`` False (a read-only index) the
    sidecar and the ANN cache found beside the catalog are read, and what the index builds
    itself is kept in memory, never written there.
    """

    def __init__(
        self, catalog: SQLiteCatalog, dimension: int, exact: bool = False, *,
        sidecar: bool = True, sidecar_after_rows: int = SIDECAR_AFTER_ROWS,
        graph_min_rows: int | None = None, ann: str = "lists", write_caches: bool = True,
    ) -> None:
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
        self._synced_marks: tuple[int, int, int] | None = None
        # namespace ids -> the languages their queries are read in; a document's language
        # is recorded with its chunks, so every sync that sees new chunks starts afresh
        self._languages: dict[tuple[int, ...], frozenset[str]] = {}
        # The restricted rows as of the marks they were read at (see restricted()).
        self._restricted: tuple[tuple[int, int, int] | None, RestrictedRows] | None = None
        # Pending chunks per namespace as of the marks they were read at (pending_counts).
        self._pending: tuple[tuple[int, int, int] | None, dict[str, int]] | None = None
        # Chunk rows read from the catalog by sync (all of them, and since the last sidecar).
        self.rows_read = 0
        self._rows_unsaved = 0
        # The sidecar (compact codes only): how opening went ("loaded", "missing", "stale",
        # "foreign", "corrupt", "off") and the writer thread, if one runs.
        self.sidecar_path = sidecar_path(catalog.path)
        self.use_sidecar = sidecar and not exact
        # A read-only index reads the caches found beside it and writes none.
        self.sidecar_after_rows = sidecar_after_rows if write_caches else sys.maxsize
        self.sidecar_status = "off"
        self._sidecar_writer: threading.Thread | None = None
        self._catalog_id = catalog.catalog_id() if self.use_sidecar else ""
        _limit_blas_threads()
        if self.use_sidecar:
            self.sidecar_status = self._load_sidecar()
        # The dense lane's partition ("lists") or HNSW graph ("hnsw") above graph_min_rows
        # live rows (None: never; [store] dense_graph_min_rows and dense_ann).
        self.graph: DenseGraph | DenseLists | None = None
        if not exact and graph_min_rows is not None:
            if ann not in ("lists", "hnsw"):
                raise ValueError(f"unknown dense ANN index {ann!r}: 'lists' or 'hnsw'")
            self.graph = (DenseLists if ann == "lists" else DenseGraph)(
                catalog.path, dimension, catalog.catalog_id(), min_rows=graph_min_rows,
                persist=write_caches)
        if self.graph is not None:
            self.graph.open(self._marks(catalog.connection())[0])
            assert isinstance(self.dense, QuantizedDenseMatrix)
            self.dense.graph = self.graph
        self.sync()

    def dense_ann_state(self) -> tuple[str, str, float] | None:
        """The dense lane's ANN cache as an operator sees it (``/metrics``): its kind
        ("lists" or "hnsw"), how it answers now (:meth:`QuantizedDenseMatrix.ann_state`:
        "loaded", "building", "below_min_rows", ...) and the seconds its last update in
        this process took (0: none); None when the exact scan is the only way."""
        if self.graph is None or not isinstance(self.dense, QuantizedDenseMatrix):
            return None
        kind = "lists" if isinstance(self.graph, DenseLists) else "hnsw"
        return kind, self.dense.ann_state() or "off", self.graph.last_build_s

    # -- sidecar ---------------------------------------------------------------

    def _sidecar_meta(self) -> dict[str, object]:
        """What a sidecar must say to be usable by this index over this catalog."""
        return {"format": SIDECAR_FORMAT, "catalog_id": self._catalog_id,
                "schema_version": SCHEMA_VERSION, "dimension": self.dimension,
                "kinds": list(CHUNK_KINDS)}

    def _load_sidecar(self) -> str:
        """Map the sidecar's arrays if it reflects this catalog; returns how it went. The
        rows and tombstones added since it was written are applied by the next sync."""
        try:
            meta, arrays = read_arrays(self.sidecar_path)
        except SidecarError as exc:
            if self.sidecar_path.exists():
                log.warning("chunk index sidecar ignored: %s", exc)
                return "corrupt"
            return "missing"
        db = self.catalog.connection()
        expected = self._sidecar_meta()
        if any(meta.get(key) != value for key, value in expected.items()):
            return "foreign"
        db.execute("BEGIN")
        try:
            chunk_seq, tomb_seq, _ = self._marks(db)
            oldest = db.execute("SELECT min(seq) FROM chunk_tombstones").fetchone()[0]
        finally:
            db.execute("COMMIT")
        seen_rows, seen_tomb = int(meta["max_rowid_seq"]), int(meta["tombstone_seq"])
        if seen_rows > chunk_seq or seen_tomb > tomb_seq:
            return "stale"  # the catalog is older than the sidecar (a restored copy)
        if tomb_seq > seen_tomb and (oldest is None or int(oldest) > seen_tomb + 1):
            return "stale"  # tombstones it has not applied are no longer logged
        try:
            dense = {k[6:]: a for k, a in arrays.items() if k.startswith("dense.")}
            posting = {k[8:]: a for k, a in arrays.items() if k.startswith("posting.")}
            assert isinstance(self.dense, QuantizedDenseMatrix)
            self.dense.restore_state(dense, meta["dense"])
            self.postings.restore_state(posting, meta["posting"])
            if "impact_terms" not in posting and self.postings.order_by_impact():
                # saved before impact orders, built now over every row: the file is written
                # anew as after reading that many rows (never by a read-only index)
                log.info("chunk index sidecar %s: impact orders added", self.sidecar_path)
                self._rows_unsaved += len(self.postings)
            # The dense rows are the posting rows that have a vector (pending chunks have
            # none), each list compacted on its own: both ascending, none past the marks.
            for ids in (dense["rowids"][: int(meta["dense"]["n"])],  # the rest is room
                        posting["rowids"][: int(meta["posting"]["n"])]):
                if ((len(ids) > 1 and not bool((np.diff(ids) > 0).all()))
                        or (len(ids) and int(ids[-1]) > seen_rows)):
                    raise ValueError("row ids do not line up")
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("chunk index sidecar ignored: %s: %s", self.sidecar_path, exc)
            self.dense = QuantizedDenseMatrix(self.dimension, self._stored_vectors)
            self.postings = PostingIndex()
            return "corrupt"
        self._tombstone_seq = seen_tomb
        return "loaded"

    def save_sidecar(self) -> int:
        """Persist the in-memory arrays beside the catalog (crash-safe: temporary file,
        fsync, rename) as of the last sync; returns its size in bytes (0: not written, the
        index is exact or the sidecar is off). Never needed for correctness: the catalog
        stays the only record, and a missing or stale sidecar is rebuilt from it."""
        if not self.use_sidecar:
            return 0
        assert isinstance(self.dense, QuantizedDenseMatrix)
        with self._sync_lock:
            marks = self._synced_marks
            if marks is None:
                return 0
            dense, dense_scalars = self.dense.export_state()
            posting, posting_scalars = self.postings.export_state()
            seq = self._tombstone_seq
            unsaved = self._rows_unsaved
        # max_rowid_seq: every row up to this id that existed then is in the arrays or was
        # deleted (AUTOINCREMENT ids only grow), so a later sync reads only newer rows.
        meta = {**self._sidecar_meta(), "max_rowid_seq": marks[0],
                "tombstone_seq": seq, "dense": dense_scalars, "posting": posting_scalars}
        arrays = {**{f"dense.{k}": a for k, a in dense.items()},
                  **{f"posting.{k}": a for k, a in posting.items()}}
        # Room after each array that appends write into (every dense array, the posting
        # lists' per-row and per-posting ones), so the rows a server indexes after mapping
        # the file do not copy the arrays into memory.
        room = {f"dense.{k}": _with_room(len(a)) for k, a in dense.items()}
        room.update({f"posting.{k}": _with_room(len(a)) for k, a in posting.items()
                     if k in APPENDABLE})
        started = time.perf_counter()
        size = write_arrays(self.sidecar_path, meta, arrays, room)
        log.info("chunk index sidecar %s written: %d rows, %.0f MB in %.1f s",
                 self.sidecar_path, int(dense_scalars["n"]), size / 2**20,
                 time.perf_counter() - started)
        with self._sync_lock:
            self._rows_unsaved -= unsaved
        return size

    def _maybe_save_sidecar(self) -> None:
        """Rewrite the sidecar in a background thread once enough rows were read since the
        last one (a failure to write is logged, never raised: the sidecar is optional)."""
        if (not self.use_sidecar or self._rows_unsaved < self.sidecar_after_rows
                or (self._sidecar_writer is not None and self._sidecar_writer.is_alive())):
            return

        def write() -> None:
            try:
                self.save_sidecar()
            except (OSError, sqlite3.Error, StoreError) as exc:
                log.warning("chunk index sidecar not written: %s", exc)

        # Not a daemon: a short-lived process (a CLI search) finishes the file before it
        # exits; a killed one leaves a temporary file, removed by the next writer.
        self._sidecar_writer = threading.Thread(target=write, name="docgraph-sidecar")
        self._sidecar_writer.start()

    def wait_for_sidecar(self, timeout: float | None = None) -> None:
        """Wait for a sidecar write started in the background (if any) to finish."""
        if self._sidecar_writer is not None:
            self._sidecar_writer.join(timeout)

    def _marks(self, db: sqlite3.Connection) -> tuple[int, int, int]:
        """(chunks added, chunks deleted, permission changes) so far: the catalog's
        sequences, read in one statement; the index is current while they stand still."""
        rows = dict(db.execute(
            "SELECT name, seq FROM sqlite_sequence"
            " WHERE name IN ('chunks', 'chunk_tombstones', 'access_changes')"
        ).fetchall())
        return (int(rows.get("chunks", 0)), int(rows.get("chunk_tombstones", 0)),
                int(rows.get("access_changes", 0)))

    def restricted(self) -> RestrictedRows:
        """The chunk rows of documents with a permission set, as of the last sync: read
        from the catalog again only when a chunk or a permission set changed since."""
        marks = self._synced_marks
        kept = self._restricted
        if kept is not None and kept[0] == marks:
            return kept[1]
        rows = RestrictedRows(self.catalog.restricted_chunk_rows())
        self._restricted = (marks, rows)
        return rows

    def sync(self) -> None:
        """Apply catalog changes since the last sync to the dense matrix and posting lists."""
        db = self.catalog.connection()
        if self._synced_marks is not None and self._marks(db) == self._synced_marks:
            return
        with self._sync_lock:
            # Rows staged by a sync that failed after its reads (a COMMIT that raised) belong
            # to no load: the rows are read again below.
            self._discard_staged()
            started = time.perf_counter()
            db.execute("BEGIN")
            try:
                marks = self._marks(db)
                if marks == self._synced_marks:
                    return
                # Pending chunks (no vector yet) join the posting lists only; the dense
                # matrix gets them when their vector arrives, as a new row (see
                # docgraph.store.sqlite.pending), so it can lag behind the posting lists.
                after = max(self.dense.max_rowid, self.postings.max_rowid)
                cursor = db.execute(
                    "SELECT id, namespace_id, vector, kind, terms, term_count FROM chunks"
                    " WHERE id > ? ORDER BY id", (after,))
                # Each batch is staged into the arrays as it is read (never all batches
                # held at once); a read of more than one batch first reserves room for the
                # rows to come, so no array is copied to grow.
                loaded, expected = 0, 0
                while batch := cursor.fetchmany(SYNC_BATCH_ROWS):
                    if loaded == 0 and len(batch) == SYNC_BATCH_ROWS:
                        expected = self._expected_rows(db, marks[0] - after,
                                                       len(self.postings))
                        self.dense.reserve(expected)
                        if expected >= LARGE_LOAD_ROWS:
                            log.info("chunk index %s: reading ~%d chunk rows from the catalog"
                                     " (sidecar %s)", self.catalog.path, expected,
                                     self.sidecar_status)
                    self._stage(read_row_batch(batch, self.dimension, self.catalog.path,
                                                   self.exact))
                    if loaded == 0 and expected:
                        self.postings.reserve(expected - len(batch))
                    loaded += len(batch)
                dead = db.execute(
                    "SELECT seq, chunk_id FROM chunk_tombstones WHERE seq > ? ORDER BY seq",
                    (self._tombstone_seq,),
                ).fetchall()
            except BaseException:
                self._discard_staged()  # nothing of a failed load becomes visible
                raise
            finally:
                db.execute("COMMIT")
            try:  # the loaded rows become visible at once in each index, or in neither
                self.postings.publish()  # may rebuild the term-major copy: can run out of memory
            except BaseException:
                self._discard_staged()
                raise
            self.dense.publish()
            if expected >= LARGE_LOAD_ROWS:
                log.info("chunk index %s: %d rows loaded in %.1f s", self.catalog.path,
                         loaded, time.perf_counter() - started)
            self.rows_read += loaded
            self._rows_unsaved += loaded
            if not self.exact and loaded >= TRIM_AFTER_ROWS:
                release_free_heap()
            if dead:
                removed = np.array(sorted(r[1] for r in dead), dtype=np.int64)
                self.dense.remove(removed)
                self.postings.remove(removed)
                self._tombstone_seq = int(dead[-1][0])
            self._synced_marks = marks
            self._languages = {}
        self._maybe_save_sidecar()
        if isinstance(self.dense, QuantizedDenseMatrix):  # build or update the graph if due
            self.dense.maintain_graph()

    def _discard_staged(self) -> None:
        """Forget the rows a sync staged in both indexes and did not publish."""
        self.dense.discard()
        self.postings.discard()

    @staticmethod
    def _expected_rows(db: sqlite3.Connection, ids_to_come: int, loaded: int) -> int:
        """Rows a sync that reads more than one batch will load: the row ids not yet
        loaded, or the chunk rows beyond the ``loaded`` ones if fewer (a catalog whose
        documents were replaced many times has ids far beyond its rows; reserving room for
        every id would ask for address space the machine can refuse, and past a mapped
        sidecar's room it would copy the arrays). An estimate: tombstones not yet applied
        can make it low, which costs one growth copy. The count walks the smallest index
        (36 ms at 10M rows with its pages cached, 5 s without)."""
        rows = int(db.execute("SELECT count(*) FROM chunks").fetchone()[0])
        return min(ids_to_come, max(rows - loaded, SYNC_BATCH_ROWS))

    def _stage(self, batch: RowBatch) -> None:
        """Append one batch to the dense matrix (its rows with a vector) and the posting
        lists (every row), not yet visible."""
        has = batch.has_vector
        rowids, namespaces, kinds = batch.rowids[has], batch.namespaces[has], batch.kinds[has]
        if isinstance(self.dense, QuantizedDenseMatrix):
            self.dense.append_codes(rowids, namespaces, batch.words, batch.codes,
                                    batch.scales, kinds, publish=False)
        else:
            self.dense.append(rowids, namespaces, batch.vectors, kinds, publish=False)
        self.postings.append(batch.rowids, batch.namespaces, batch.kinds, batch.terms,
                             batch.term_counts, publish=False)

    def _stored_vectors(
        self, rowids: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], Vector]:
        """The catalog's vectors (as float32) of the given chunks (deleted ones absent)."""
        return stored_vectors(self.catalog.connection(), rowids, self.dimension,
                              self.catalog.path)

    def __len__(self) -> int:
        """Live chunks loaded (all namespaces and kinds, pending ones included)."""
        return len(self.postings)

    def pending_counts(self, namespaces: Iterable[str]) -> dict[str, int]:
        """Chunks of ``namespaces`` not embedded yet, as of the last sync: read from the
        catalog again only when its chunks changed since (a fill or a write moves the
        marks), so an answer that reports them costs no statement while nothing changes."""
        marks = self._synced_marks
        kept = self._pending
        if kept is None or kept[0] != marks:
            kept = (marks, self.catalog.pending_counts(open_only=True))
            self._pending = kept
        wanted = set(namespaces)
        return {name: n for name, n in kept[1].items() if name in wanted}

    def _term_ids(self, text: str, namespace_ids: list[int]) -> list[int]:
        """The stored ids of the query's terms, read in every language of the namespaces."""
        key = tuple(sorted(namespace_ids))
        languages = self._languages.get(key)
        if languages is None:  # read once per namespace set between syncs
            languages = self.catalog.namespace_languages(namespace_ids)
            if len(self._languages) >= 1024:
                self._languages = {}
            self._languages[key] = languages
        terms = query_terms_for(text, languages)
        if not terms:
            return []
        found = stored_term_ids(self.catalog.connection(), terms)
        return [found[t] for t in terms if t in found]

    def for_query(self, readers: frozenset[str] | None = None) -> EmbeddedQueryView:
        """The index as one query reads it: brought up to date with the catalog now (a
        CLI build's rows become visible to a server's next query), then searched without
        checking again, and each stored vector it reads read once for the query. With
        ``readers`` (a caller's principals), the chunks of documents whose permission set
        names none of them are left out of every search before ranking."""
        self.sync()
        keep = None if readers is None else self.restricted().row_filter(readers)
        return EmbeddedQueryView(self, keep)

    def lexical_scores(
        self, text: str, rowids: Sequence[int], namespaces: frozenset[str],
        kind: ChunkKind = "text",
    ) -> dict[int, float]:
        """BM25 scores of ``text`` for the given chunks of ``kind`` only, scored with that
        kind's statistics (absent: no term matched, or another kind)."""
        return self.for_query().lexical_scores(text, rowids, namespaces, kind)

    def vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Unit vectors of the given chunks (deleted ones absent): from the dense matrix when
        exact, else read from the catalog."""
        return self.for_query().vectors(rowids)

    def _namespace_ids(self, namespaces: frozenset[str]) -> list[int]:
        return list(self.catalog.namespace_ids(require_namespaces(namespaces)).values())

    def dense_search(
        self, vector: Vector, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of the allowed namespaces by cosine similarity (exact scores;
        candidates by compact codes unless the index is ``exact``)."""
        return self.for_query().dense_search(vector, k, namespaces, kind)

    def lexical_search(
        self, text: str, k: int, namespaces: frozenset[str], kind: ChunkKind = "text"
    ) -> list[ScoredRow]:
        """Top ``k`` chunks of ``kind`` in the allowed namespaces by BM25 over breadcrumb +
        text, scored with the statistics of ``kind``'s live chunks only."""
        return self.for_query().lexical_search(text, k, namespaces, kind)


_blas_limited = False


def _limit_blas_threads() -> None:
    """Single-query matrix-vector products run fastest on one BLAS thread (measured ~10x on
    2 shared cores); set once per process."""
    global _blas_limited
    if not _blas_limited:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True
