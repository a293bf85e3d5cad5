"""The embedded catalog: one SQLite file in WAL mode, one connection per thread, and how it
stores chunk rows (float16 vector blobs, BM25 term blobs). The schema and its migrations are
:mod:`docgraph.store.sqlite.schema`; the document write it shares with PostgreSQL is
:mod:`docgraph.store.sql.documents`."""

from __future__ import annotations

import functools
import json
import logging
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt

from docgraph.errors import ReadOnlyIndex, StoreError
from docgraph.model import Vector
from docgraph.store.base import DocumentWrite
from docgraph.store.lexical import CountedTerms, EncodedTerms, TermDictionary, count_terms
from docgraph.store.sql.dialect import SQLITE, Dialect
from docgraph.store.sql.documents import ChunkRows, SqlCatalogDocuments
from docgraph.store.sqlite.access import (
    OpenMode,
    cannot_open,
    disk_full,
    is_full,
    open_mode,
    read_only_uri,
)
from docgraph.store.sqlite.connections import ConnectionPool
from docgraph.store.sqlite.pending import PENDING_BLOB, SQLitePendingVectors, pending_flags
from docgraph.store.sqlite.readonly import TempTables, stand_in_columns
from docgraph.store.sqlite.schema import SCHEMA, SCHEMA_VERSION, missing_columns, prepare
from docgraph.store.sqlite.vectors import decode_vector, encode_vector

log = logging.getLogger(__name__)

#: Why the ``-wal`` of an index opened immutable is not read (and what to do).
UNREAD_WAL = ("SQLite cannot read in a read-only folder without the -shm file beside it, so "
              "those changes are not seen: copy or mount the index after its writers closed "
              "(closing checkpoints them into the file), or with its -shm file")


class SQLiteCatalog(SqlCatalogDocuments, SQLitePendingVectors):
    """The catalog in one SQLite file (WAL mode), safe to share between threads.

    Each thread gets its own connection (one an ended thread left, else a new one); writes
    are serialized by SQLite's ``BEGIN IMMEDIATE``. The document write is shared
    (:class:`SqlCatalogDocuments`: a batch in one transaction, a savepoint per document);
    this class stores its chunk rows (:class:`_ChunkRows`: float16 vector blobs and BM25
    term blobs).
    """

    dialect: Dialect = SQLITE
    stores_bm25_terms = True  # writes want DocumentWrite.lexical_terms (counted if absent)

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create index directory {self.path.parent}: {exc}") from exc
        self.terms = TermDictionary()
        #: Writable, or read-only and why (``read_only``: ``store.read_only``).
        self.mode = open_mode(self.path, read_only)
        self._temp_tables = TempTables() if self.mode.read_only else None
        self._connections = ConnectionPool(functools.partial(_connect, self.path, self.mode))
        if self.mode.read_only:
            self._check_read_only()
            log.warning("index %s opened read-only (%s): searches and reads work; traces "
                        "and audit are not recorded, and builds and admin changes are "
                        "refused", self.path, self.mode.reason)
            if self._unread_wal():
                log.warning("%s-wal holds changes a writer never checkpointed: %s", self.path,
                            UNREAD_WAL)
            return
        db = self.connection()
        try:
            db.executescript("BEGIN IMMEDIATE;" + SCHEMA + "COMMIT;")
        except sqlite3.DatabaseError as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            if is_full(exc):
                raise disk_full(self.path, db, exc) from exc
            raise cannot_open(self.path, exc) from exc
        with self.transaction() as db:
            prepare(db, self.terms, self.path)

    def _check_read_only(self) -> None:
        """A read-only file must be a docgraph index of this schema version already (it
        cannot be created or upgraded in place)."""
        try:
            row = self.connection().execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            if self._unread_wal():
                raise StoreError(f"{self.path}: the index is in its -wal file, which "
                                 f"{UNREAD_WAL}") from exc
            raise cannot_open(self.path, exc) from exc
        if row is None or int(row[0]) != SCHEMA_VERSION:
            found = "none" if row is None else row[0]
            raise StoreError(
                f"{self.path}: index schema version {found}, this docgraph reads version "
                f"{SCHEMA_VERSION}; the index is read-only ({self.mode.reason}), so it "
                "cannot be upgraded in place: open it once where it is writable")

    def _unread_wal(self) -> bool:
        """Opened immutable beside a non-empty ``-wal``: SQLite does not read that file."""
        wal = Path(f"{self.path}-wal")
        return self.mode.immutable and wal.is_file() and wal.stat().st_size > 0

    @property
    def read_only(self) -> str:
        """Why the index is read-only (empty when it is writable)."""
        return self.mode.reason

    def catalog_id(self) -> str:
        """A random identity written once into this file (files copied from it share it);
        what the chunk index's sidecar file names to be recognised as this catalog's."""
        row = self.connection().execute(
            "SELECT value FROM meta WHERE key = 'catalog_id'").fetchone()
        return str(row[0]) if row else ""

    # -- connections -------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection to the catalog file (reused after its thread ends:
        :mod:`docgraph.store.sqlite.connections`); on a read-only index, with empty
        ``TEMP`` tables standing in for those the file lacks
        (:mod:`docgraph.store.sqlite.readonly`)."""
        db = self._connections.get()
        if self._temp_tables is not None:
            self._temp_tables.apply(db)
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: commits on success, rolls back on any exception. A full
        disk raises :class:`~docgraph.errors.StoreFull` (after the rollback) naming the
        file system; a read-only index refuses with :class:`~docgraph.errors.ReadOnlyIndex`."""
        if self.mode.read_only:
            raise ReadOnlyIndex(
                f"{self.path} is opened read-only ({self.mode.reason}): this changes the "
                "index, which needs it writable (searches and reads work)")
        db = self.connection()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            if not is_full(exc):
                raise
            if db.in_transaction:  # a failed COMMIT may leave the transaction open
                db.execute("ROLLBACK")
            raise disk_full(self.path, db, exc) from exc

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads on this thread that see one snapshot of the file (a deferred read
        transaction: WAL readers keep the snapshot of their first read until it ends), for
        figures computed from several statements (see the port). Inside a transaction
        already: that one."""
        db = self.connection()
        if db.in_transaction:
            yield
            return
        db.execute("BEGIN")
        try:
            yield
        finally:
            if db.in_transaction:
                db.execute("COMMIT")  # nothing written: ends the read

    def ensure_tables(self, script: str) -> None:
        """Create the tables of ``script`` (``CREATE ... IF NOT EXISTS`` statements) if
        missing. A read-only index cannot: its connections get empty ``TEMP`` tables for
        those the file lacks, so reading them finds nothing instead of failing. Inside a
        transaction already (a :meth:`snapshot`), in that one: the statements write
        nothing when the tables exist."""
        if self._temp_tables is not None:
            self._temp_tables.register(script)
            return
        statements = [s for s in script.split(";") if s.strip()]
        db = self.connection()
        if db.in_transaction:  # a store first used inside a snapshot: created in it
            for statement in statements:
                db.execute(statement)
            return
        with self.transaction() as db:
            for statement in statements:
                db.execute(statement)

    def close(self) -> None:
        """Close every connection opened by any thread."""
        self._connections.close()
        if self._temp_tables is not None:
            self._temp_tables.forget()

    # -- model -------------------------------------------------------------

    def set_embedding_model(self, name: str, dimension: int) -> None:
        """Record the embedding model (name and dimension) of this index."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (name,))
            db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embed_dimension', ?)", (str(dimension),)
            )

    def _access_changed(self, db: sqlite3.Connection) -> None:
        """Move the ``access_changes`` sequence, which the chunk index reads with its other
        marks (one row kept)."""
        db.execute("INSERT INTO access_changes DEFAULT VALUES")
        db.execute("DELETE FROM access_changes WHERE seq < last_insert_rowid()")

    def restricted_chunk_rows(self) -> list[tuple[frozenset[str], npt.NDArray[np.int64]]]:
        """(permission set, chunk row ids) of every document with a permission set, read
        through the restricted documents and the chunks' document index (never the chunk
        rows themselves), one row per document: what the in-memory lanes filter by
        (:class:`~docgraph.store.restricted.RestrictedRows`)."""
        rows = self.connection().execute(
            "SELECT d.access, group_concat(c.id) FROM documents d"
            " JOIN chunks c ON c.document_id = d.id"
            " WHERE d.access IS NOT NULL GROUP BY d.id").fetchall()
        parsed: dict[str, frozenset[str]] = {}  # documents share a few sets: parse each once
        found: list[tuple[frozenset[str], npt.NDArray[np.int64]]] = []
        for raw, ids in rows:
            if raw not in parsed:
                parsed[raw] = self.dialect.principals_value(raw)
            found.append((parsed[raw], np.array(ids.split(","), dtype=np.int64)))
        return found

    # -- documents ---------------------------------------------------------

    def reusable_vectors(
        self, namespace: str, doc_id: str, embedded_text_hashes: Iterable[str]
    ) -> dict[str, Vector]:
        """Vectors of this document's current chunks whose embedded text is unchanged."""
        wanted = set(embedded_text_hashes)
        if not wanted:
            return {}
        rows = self.connection().execute(
            "SELECT c.embed_hash, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
            " JOIN namespaces n ON n.id = d.namespace_id WHERE n.name = ? AND d.doc_id = ?"
            " AND c.vector != x''",  # a pending chunk has no vector to reuse
            (namespace, doc_id),
        ).fetchall()
        return {
            str(h): decode_vector(v) for h, v in rows if h in wanted
        }


    def _ends_batch(self, db: sqlite3.Connection, exc: Exception) -> bool:
        """SQLite may roll the whole transaction back on some errors (a full disk among
        them: https://sqlite.org/lang_transaction.html, "Response To Errors Within A
        Transaction"); a full disk ends the batch even where it did not, as no commit
        could succeed."""
        return not db.in_transaction or is_full(exc)

    def _chunk_rows(self, units: Sequence[Sequence[DocumentWrite]]) -> ChunkRows:
        """A batch's chunk rows: their BM25 terms are counted now, before the write lock is
        taken (the costly part), unless the pipeline counted them already."""
        return _ChunkRows(self.terms, units)


class _ChunkRows:
    """The chunk rows of one batch on SQLite: a float16 vector blob and a BM25 term blob
    each. The batch's new terms are added once, before any document (two statements per
    batch instead of per document); if a document fails, the terms the batch inserted that
    no written document uses are deleted again. Ids are cached only after the commit."""

    def __init__(self, terms: TermDictionary, units: Sequence[Sequence[DocumentWrite]]) -> None:
        self.terms = terms
        # one list per document: its chunks' terms, then each attachment's
        self.counted = [[t for w in unit for t in (
            w.lexical_terms if w.lexical_terms is not None else
            count_terms(list(zip(w.breadcrumbs, (c.text for c in w.chunks), strict=True)),
                        w.language))]
            for unit in units]
        self.sizes = [len(w.chunks) for unit in units for w in unit]
        self.encoded: list[Sequence[EncodedTerms]] = []  # per write, as the batch counts them
        self.learnt: dict[str, int] = {}
        self.inserted: set[str] = set()

    def begin(self, db: sqlite3.Connection) -> None:
        """Insert the batch's new terms and encode every chunk's."""
        encoded, self.learnt, self.inserted = self.terms.encode_counted(
            db, [t for terms in self.counted for t in terms])
        start = 0
        for size in self.sizes:
            self.encoded.append(encoded[start:start + size])
            start += size

    def insert(self, db: sqlite3.Connection, position: int, document_id: int, ns_id: int,
               write: DocumentWrite, hashes: Sequence[str]) -> None:
        """One ``executemany`` of the write's chunk rows."""
        vectors = np.ascontiguousarray(write.vectors, dtype=np.float32)
        paths: dict[tuple[str, ...], str] = {}  # chunks of a document share section paths
        for chunk in write.chunks:
            if chunk.section_path not in paths:
                paths[chunk.section_path] = json.dumps(list(chunk.section_path),
                                                       ensure_ascii=False)
        db.executemany(
            "INSERT INTO chunks(document_id, namespace_id, chunk_index, text, breadcrumb,"
            " section_path, token_count, prev_index, next_index, parent_index,"
            " embed_hash, vector, terms, term_count, page_first, page_last, ocr)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(document_id, ns_id, chunk.index, chunk.text, crumb,
              paths[chunk.section_path], chunk.token_count,
              chunk.prev_index, chunk.next_index, chunk.parent_index,
              embed_hash, PENDING_BLOB if pending else encode_vector(vector), lexical.blob,
              lexical.length, *(chunk.pages or (None, None)), int(chunk.ocr))
             for chunk, crumb, embed_hash, vector, lexical, pending in zip(
                 write.chunks, write.breadcrumbs, hashes, vectors, self.encoded[position],
                 pending_flags(write.missing, len(write.chunks)), strict=True)],
        )

    def failed(self, db: sqlite3.Connection, units_written: int) -> None:
        """Delete the terms this batch inserted that no written document uses (the catalog
        holds no term without a chunk that once used it; terms committed before the batch
        are never touched)."""
        if self.inserted:
            self.learnt = _drop_unused_terms(db, self.learnt, self.inserted,
                                             self.counted[:units_written])

    def committed(self) -> None:
        """Cache the term ids the batch learnt."""
        self.terms.committed(self.learnt)


def _connect(path: Path, mode: OpenMode) -> sqlite3.Connection:
    """A new connection to the catalog file, in autocommit mode (transactions are explicit);
    read-only (``mode=ro``, and ``query_only``) when ``mode`` says so."""
    if mode.read_only:
        return _connect_read_only(path, mode)
    try:
        db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                             timeout=30)
        # Rows of ~1.5 KB (float16 vector, text, term blob): 5 fit an 8 KB page,
        # 2 a 4 KB one (a new file only; an existing one keeps its page size).
        db.execute("PRAGMA page_size=8192")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=30000")
    except sqlite3.DatabaseError as exc:
        raise cannot_open(path, exc) from exc
    return db


def _connect_read_only(path: Path, mode: OpenMode) -> sqlite3.Connection:
    """A read-only connection: SQLite's ``mode=ro`` URI (``immutable=1`` where the folder
    cannot hold the WAL's shared-memory file), no journal or page-size pragmas (they would
    write), and ``query_only`` as a second guard."""
    try:
        db = sqlite3.connect(read_only_uri(path, mode), uri=True, isolation_level=None,
                             check_same_thread=False, timeout=30)
        db.execute("PRAGMA query_only=ON")
        db.execute("PRAGMA foreign_keys=ON")
        db.execute("PRAGMA busy_timeout=30000")
        stand_in_columns(db, missing_columns(db))
    except sqlite3.DatabaseError as exc:
        raise cannot_open(path, exc) from exc
    return db


def _drop_unused_terms(db: sqlite3.Connection, learnt: dict[str, int], inserted: set[str],
                       written: Sequence[Sequence[CountedTerms]]) -> dict[str, int]:
    """Delete the ``inserted`` terms that no ``written`` chunk uses; returns the ids to cache."""
    used = {t for terms in written for tf, _ in terms for t in tf}
    unused = inserted - used
    db.executemany("DELETE FROM terms WHERE id = ?", [(learnt[t],) for t in unused])
    return {t: i for t, i in learnt.items() if t not in unused}
