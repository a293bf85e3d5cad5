"""The embedded catalog: one SQLite file in WAL mode, its schema and its migrations."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from docgraph.errors import StoreError
from docgraph.model import (
    DocumentRecord,
    EntityLink,
    RowOrigin,
    StoredChunk,
    Vector,
)
from docgraph.store.base import (
    DocumentWrite,
)
from docgraph.store.lexical import (
    CountedTerms,
    EncodedTerms,
    TermDictionary,
    count_terms,
)
from docgraph.store.sql.catalog import SqlCatalogRecords
from docgraph.store.sql.dialect import SQLITE, Dialect
from docgraph.store.sql.graph import write_links
from docgraph.store.sqlite.vectors import (
    STORED,
    decode_vector,
    encode_vector,
    float32_to_stored,
)
from docgraph.text import text_hash

SCHEMA_VERSION = 6

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS namespaces (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    graph_dirty INTEGER NOT NULL DEFAULT 0,
    vocab_hash TEXT NOT NULL DEFAULT '',
    graph_built_at REAL
);
CREATE TABLE IF NOT EXISTS sources (
    id INTEGER PRIMARY KEY,
    urn TEXT NOT NULL,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    scheme TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_indexed_at REAL,
    display_name TEXT,
    public_url TEXT,
    UNIQUE (urn, namespace_id)
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    source_id INTEGER REFERENCES sources(id) ON DELETE CASCADE,
    kind TEXT NOT NULL DEFAULT 'document',
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    doc_id TEXT NOT NULL,
    path TEXT NOT NULL,
    title TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    change_token TEXT NOT NULL,
    media_type TEXT NOT NULL,
    chunk_count INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    origin_source TEXT,
    origin_schema TEXT,
    origin_table TEXT,
    origin_pk_column TEXT,
    origin_pk_value TEXT,
    metadata TEXT NOT NULL DEFAULT '{}',
    parent_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,
    line_hashes TEXT,
    lines_dropped TEXT NOT NULL DEFAULT '[]',
    UNIQUE (namespace_id, doc_id),
    UNIQUE (source_id, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    namespace_id INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL,
    kind TEXT NOT NULL DEFAULT 'text',
    text TEXT NOT NULL,
    breadcrumb TEXT NOT NULL,
    section_path TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    prev_index INTEGER,
    next_index INTEGER,
    parent_index INTEGER,
    embed_hash TEXT NOT NULL,
    vector BLOB NOT NULL,
    terms BLOB NOT NULL DEFAULT x'',
    term_count INTEGER NOT NULL DEFAULT 0,
    page_first INTEGER,
    page_last INTEGER,
    ocr INTEGER NOT NULL DEFAULT 0,
    UNIQUE (document_id, chunk_index)
);
CREATE TABLE IF NOT EXISTS terms (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
CREATE INDEX IF NOT EXISTS chunks_namespace ON chunks(namespace_id);
CREATE TABLE IF NOT EXISTS chunk_tombstones (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    chunk_id INTEGER NOT NULL
);
CREATE TRIGGER IF NOT EXISTS chunks_ad AFTER DELETE ON chunks BEGIN
    INSERT INTO chunk_tombstones(chunk_id) VALUES (old.id);
END;
CREATE TABLE IF NOT EXISTS entities (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    key TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    UNIQUE (namespace_id, key)
);
CREATE TABLE IF NOT EXISTS chunk_entities (
    chunk_id INTEGER NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    frequency INTEGER NOT NULL,
    first_position INTEGER NOT NULL,
    score REAL NOT NULL,
    PRIMARY KEY (chunk_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunk_entities_entity ON chunk_entities(entity_id, chunk_id);
CREATE TABLE IF NOT EXISTS entity_edges (
    namespace_id INTEGER NOT NULL,
    source INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    target INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    weight REAL NOT NULL,
    chunks INTEGER NOT NULL,
    PRIMARY KEY (source, target)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entity_edges_target ON entity_edges(target, source);
CREATE INDEX IF NOT EXISTS entity_edges_namespace ON entity_edges(namespace_id);
CREATE TABLE IF NOT EXISTS communities (
    id INTEGER PRIMARY KEY,
    namespace_id INTEGER NOT NULL REFERENCES namespaces(id),
    level INTEGER NOT NULL,
    ordinal INTEGER NOT NULL,
    parent_id INTEGER REFERENCES communities(id) ON DELETE CASCADE,
    size INTEGER NOT NULL,
    title TEXT NOT NULL,
    report_doc_id TEXT,
    UNIQUE (namespace_id, level, ordinal)
);
CREATE TABLE IF NOT EXISTS community_members (
    community_id INTEGER NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
    entity_id INTEGER NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    centrality REAL NOT NULL,
    PRIMARY KEY (community_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS community_members_entity ON community_members(entity_id);
CREATE TABLE IF NOT EXISTS community_row_sources (
    community_id INTEGER NOT NULL REFERENCES communities(id) ON DELETE CASCADE,
    doc_id TEXT NOT NULL,
    origin_source TEXT NOT NULL,
    origin_schema TEXT NOT NULL,
    origin_table TEXT NOT NULL,
    origin_pk_column TEXT NOT NULL,
    origin_pk_value TEXT NOT NULL,
    PRIMARY KEY (community_id, doc_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS failures (
    source_id INTEGER NOT NULL REFERENCES sources(id) ON DELETE CASCADE,
    path TEXT NOT NULL,
    reason TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (source_id, path)
);
"""


def _check_write(write: DocumentWrite) -> None:
    """Reject a write whose parts do not line up or whose vectors are not finite."""
    n = len(write.chunks)
    if not (n == len(write.breadcrumbs) == len(write.embedded_texts) == len(write.vectors)):
        raise StoreError(f"{write.doc_id}: {n} chunks but {len(write.vectors)} vectors")
    if write.entity_links and len(write.entity_links) != n:
        raise StoreError(f"{write.doc_id}: entity links for {len(write.entity_links)} of "
                         f"{n} chunks")
    if n and (write.vectors.ndim != 2 or not np.isfinite(write.vectors).all()):
        finite = (np.isfinite(write.vectors).reshape(n, -1).all(axis=1)
                  if write.vectors.ndim >= 1 else np.zeros(n, dtype=bool))
        bad = int(np.flatnonzero(~finite)[0]) if not finite.all() else 0
        raise StoreError(f"{write.doc_id}#chunk-{write.chunks[bad].index}: invalid vector")


class SQLiteCatalog(SqlCatalogRecords):
    """The catalog in one SQLite file (WAL mode), safe to share between threads.

    Each thread gets its own connection; writes are serialized by SQLite's ``BEGIN
    IMMEDIATE`` and every document write is one transaction.
    """

    dialect: Dialect = SQLITE
    stores_bm25_terms = True  # writes want DocumentWrite.lexical_terms (counted if absent)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create index directory {self.path.parent}: {exc}") from exc
        self._local = threading.local()
        self.terms = TermDictionary()
        self._connections: list[sqlite3.Connection] = []
        self._connections_lock = threading.Lock()
        db = self.connection()
        try:
            db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        except sqlite3.DatabaseError as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"{self.path}: not a docgraph index ({exc})") from exc
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                db.execute(
                    "INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
                )
                db.execute("INSERT INTO meta VALUES ('vector_dtype', ?)", (STORED.str,))
            elif int(row[0]) in (1, 2, 3, 4, 5):
                if int(row[0]) == 1:
                    _migrate_1_to_2(db, self.terms)
                if int(row[0]) <= 2:
                    _migrate_2_to_3(db)
                if int(row[0]) <= 3:
                    _migrate_3_to_4(db)
                if int(row[0]) <= 4:
                    _migrate_4_to_5(db)
                _migrate_5_to_6(db)
            elif int(row[0]) != SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: index schema version {row[0]} is not supported "
                    f"(this docgraph reads version {SCHEMA_VERSION})"
                )
            db.execute("INSERT OR IGNORE INTO meta VALUES ('catalog_id', ?)",
                        (uuid.uuid4().hex,))
            _add_source_naming(db)
            _add_document_parents(db)
            _add_line_fingerprints(db)

    def catalog_id(self) -> str:
        """A random identity written once into this file (files copied from it share it);
        what the chunk index's sidecar file names to be recognised as this catalog's."""
        row = self.connection().execute(
            "SELECT value FROM meta WHERE key = 'catalog_id'").fetchone()
        return str(row[0]) if row else ""

    # -- connections -------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        """This thread's connection to the catalog file."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(
                    str(self.path), isolation_level=None, check_same_thread=False, timeout=30
                )
                # Rows of ~1.5 KB (float16 vector, text, term blob): 5 fit an 8 KB page,
                # 2 a 4 KB one (a new file only; an existing one keeps its page size).
                db.execute("PRAGMA page_size=8192")
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.execute("PRAGMA foreign_keys=ON")
                db.execute("PRAGMA busy_timeout=30000")
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: not a docgraph index ({exc})") from exc
            self._local.db = db
            with self._connections_lock:
                self._connections.append(db)
        return db

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: commits on success, rolls back on any exception."""
        db = self.connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        else:
            db.execute("COMMIT")

    def close(self) -> None:
        """Close every connection opened by any thread."""
        with self._connections_lock:
            for db in self._connections:
                db.close()
            self._connections.clear()
        self._local = threading.local()

    # -- model -------------------------------------------------------------

    def set_embedding_model(self, name: str, dimension: int) -> None:
        """Record the embedding model (name and dimension) of this index."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('embed_model', ?)", (name,))
            db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embed_dimension', ?)", (str(dimension),)
            )

    # -- documents ---------------------------------------------------------

    def write_document(self, write: DocumentWrite) -> DocumentRecord:
        """Replace the document's row and every chunk in one transaction.

        Either the new version is fully stored or, on any error, the old version stays.
        """
        return self.write_documents([write])[0]

    def write_documents(self, writes: Sequence[DocumentWrite]) -> list[DocumentRecord]:
        """Replace several documents in one transaction, each one atomically.

        Every document is written inside its own savepoint. If one fails, it keeps its old
        version, the documents before it are committed, the ones after it are not written,
        and the error propagates. A crash before the commit leaves every old version.
        One transaction per batch (instead of per document) is what makes bulk ingest fast:
        the commit and the statement setup are paid once.
        """
        if not writes:
            return []
        units = [[w, *w.attachments] for w in writes]  # a document and its attachments
        for unit in units:
            for write in unit:
                _check_write(write)
        if len({(w.source.id, w.path) for unit in units for w in unit}) \
                < sum(len(unit) for unit in units):
            raise StoreError("a batch of document writes names one document twice")
        # BM25 terms are counted before the write lock is taken (the costly part), unless
        # the pipeline counted them already; one list per write, its attachments' after it.
        counted = [[t for w in unit for t in (
            w.lexical_terms if w.lexical_terms is not None else
            count_terms(list(zip(w.breadcrumbs, (c.text for c in w.chunks), strict=True))))]
            for unit in units]
        now = time.time()
        done: list[DocumentRecord] = []
        failure: Exception | None = None
        learnt: dict[str, int] = {}
        with self.transaction() as db:
            # The batch's new terms are added once, before any document (two statements per
            # batch instead of per document); if a document fails, the terms the batch
            # inserted that no written document uses are deleted again. Ids are cached only
            # after the commit.
            encoded, learnt, inserted = self.terms.encode_counted(
                db, [t for terms in counted for t in terms])
            ns_ids: dict[str, int] = {}
            start = 0
            for write in writes:
                namespace = write.source.namespace
                if namespace not in ns_ids:
                    ns_ids[namespace] = self._namespace_id(db, namespace)
                size = len(write.chunks) + sum(len(a.chunks) for a in write.attachments)
                terms = encoded[start:start + size]
                start += size
                db.execute("SAVEPOINT document")
                try:
                    record = self._write_one(db, ns_ids[namespace], write, terms, now)
                except Exception as exc:  # this document keeps its old version
                    db.execute("ROLLBACK TO document")
                    db.execute("RELEASE document")
                    failure = exc
                    break
                db.execute("RELEASE document")
                done.append(record)
            if failure is not None and inserted:
                learnt = self._drop_unused_terms(db, learnt, inserted, counted[:len(done)])
            db.executemany("DELETE FROM failures WHERE source_id = ? AND path = ?",
                           [(d.source_id, d.path) for d in done])
            db.executemany("UPDATE namespaces SET graph_dirty = 1 WHERE id = ?",
                           [(ns_ids[n],) for n in dict.fromkeys(d.namespace for d in done)])
        self.terms.committed(learnt)
        if failure is not None:
            raise failure
        return done

    @staticmethod
    def _drop_unused_terms(db: sqlite3.Connection, learnt: dict[str, int], inserted: set[str],
                           written: Sequence[Sequence[CountedTerms]]) -> dict[str, int]:
        """After a failed document: delete the terms this batch inserted that no written
        document uses (the catalog holds no term without a chunk that once used it; terms
        committed before the batch are never touched); returns the ids to cache."""
        used = {t for terms in written for tf, _ in terms for t in tf}
        unused = inserted - used
        db.executemany("DELETE FROM terms WHERE id = ?", [(learnt[t],) for t in unused])
        return {t: i for t, i in learnt.items() if t not in unused}

    def _write_one(
        self, db: sqlite3.Connection, ns_id: int, write: DocumentWrite,
        terms: Sequence[EncodedTerms], now: float,
    ) -> DocumentRecord:
        """The statements of one document write and its attachments' (inside the caller's
        savepoint); ``terms`` holds the document's chunks' terms, then each attachment's."""
        record = self._write_unit(db, ns_id, write, terms[:len(write.chunks)], now, None)
        start = len(write.chunks)
        for attachment in write.attachments:
            self._write_unit(db, ns_id, attachment,
                             terms[start:start + len(attachment.chunks)], now, record.id)
            start += len(attachment.chunks)
        stale = self._stale_attachments(db, record.id, [a.path for a in write.attachments])
        for row in stale:
            db.execute("DELETE FROM chunks WHERE document_id = ?", (row,))
            db.execute("DELETE FROM documents WHERE id = ?", (row,))
        return record

    def _write_unit(
        self, db: sqlite3.Connection, ns_id: int, write: DocumentWrite,
        terms: Sequence[EncodedTerms], now: float, parent_id: int | None,
    ) -> DocumentRecord:
        """One document row and its chunks (a file's document, or one of its attachments
        with ``parent_id`` its row)."""
        chunks = list(write.chunks)
        document_id = self._upsert_document(db, write, ns_id, len(chunks), now, parent_id)
        db.execute("DELETE FROM chunks WHERE document_id = ?", (document_id,))
        vectors = np.ascontiguousarray(write.vectors, dtype=np.float32)
        paths: dict[tuple[str, ...], str] = {}  # chunks of a document share section paths
        for chunk in chunks:
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
              text_hash(embedded), encode_vector(vector), lexical.blob, lexical.length,
              *(chunk.pages or (None, None)), int(chunk.ocr))
             for chunk, crumb, embedded, vector, lexical in zip(
                 chunks, write.breadcrumbs, write.embedded_texts, vectors, terms,
                 strict=True)],
        )
        if any(write.entity_links):
            rowids = dict(db.execute(
                "SELECT chunk_index, id FROM chunks WHERE document_id = ?", (document_id,)
            ).fetchall())
            self._write_links(db, ns_id, [
                (rowids[chunk.index], link)
                for chunk, links in zip(chunks, write.entity_links, strict=True)
                for link in links
            ])
        return DocumentRecord(
            int(document_id), write.doc_id, write.source.id, write.source.namespace, write.path,
            write.title, write.content_hash, write.change_token, write.media_type, len(chunks),
            now, dict(write.metadata),
        )

    @staticmethod
    def _write_links(
        db: sqlite3.Connection, ns_id: int, links: Sequence[tuple[int, EntityLink]]
    ) -> None:
        """Upsert the entities of (chunk row id, link) pairs, in order, and link them."""
        write_links(SQLITE, db, ns_id, links)

    def delete_document(self, document: DocumentRecord) -> None:
        """Delete a document, its chunks and its attachments in one transaction."""
        with self.transaction() as db:
            db.execute("DELETE FROM chunks WHERE document_id IN"
                       " (SELECT id FROM documents WHERE parent_id = ?)", (document.id,))
            db.execute("DELETE FROM documents WHERE parent_id = ?", (document.id,))
            db.execute("DELETE FROM chunks WHERE document_id = ?", (document.id,))
            db.execute("DELETE FROM documents WHERE id = ?", (document.id,))
            db.execute(
                "UPDATE namespaces SET graph_dirty = 1 WHERE name = ?", (document.namespace,)
            )

    def reusable_vectors(
        self, namespace: str, doc_id: str, embedded_text_hashes: Iterable[str]
    ) -> dict[str, Vector]:
        """Vectors of this document's current chunks whose embedded text is unchanged."""
        wanted = set(embedded_text_hashes)
        if not wanted:
            return {}
        rows = self.connection().execute(
            "SELECT c.embed_hash, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
            " JOIN namespaces n ON n.id = d.namespace_id WHERE n.name = ? AND d.doc_id = ?",
            (namespace, doc_id),
        ).fetchall()
        return {
            str(h): decode_vector(v) for h, v in rows if h in wanted
        }

    # -- chunks ------------------------------------------------------------

    def chunks_by_rowid(self, rowids: Sequence[int]) -> dict[int, StoredChunk]:
        """Stored chunks (with document identity and title) for the given row ids."""
        out: dict[int, StoredChunk] = {}
        ids = list(dict.fromkeys(int(r) for r in rowids))
        db = self.connection()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            marks = ",".join("?" * len(part))
            for row in db.execute(
                "SELECT c.id, d.doc_id, n.name, c.chunk_index, c.text, c.section_path, d.title,"
                " d.path, c.prev_index, c.next_index, c.parent_index, d.origin_source,"
                " d.origin_schema, d.origin_table, d.origin_pk_column, d.origin_pk_value,"
                " c.page_first, c.page_last, c.ocr FROM chunks c"
                " JOIN documents d ON d.id = c.document_id"
                f" JOIN namespaces n ON n.id = c.namespace_id WHERE c.id IN ({marks})",
                part,
            ):
                out[int(row[0])] = StoredChunk(
                    rowid=int(row[0]), chunk_id=f"{row[1]}#chunk-{row[3]}", doc_id=row[1],
                    namespace=row[2], index=int(row[3]), text=row[4],
                    section_path=tuple(json.loads(row[5])), title=row[6], source_path=row[7],
                    prev_index=row[8], next_index=row[9], parent_index=row[10],
                    origin=None if row[11] is None else RowOrigin(*row[11:16]),
                    pages=None if row[16] is None else (int(row[16]), int(row[17])),
                    ocr=bool(row[18]),
                )
        return out

    def clear_all_chunks(self) -> None:
        """Drop every chunk and forget content hashes, so the next build re-embeds all."""
        with self.transaction() as db:
            db.execute("DELETE FROM chunks")
            db.execute("UPDATE documents SET content_hash = '', change_token = '', chunk_count = 0")
            db.execute("DELETE FROM meta WHERE key IN ('embed_model', 'embed_dimension')")


def _add_source_naming(db: sqlite3.Connection) -> None:
    """Give ``sources`` its display name and public URL columns where an older file lacks
    them (nullable, so a file written before reads the same; no version step needed)."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(sources)").fetchall()}
    for column in ("display_name", "public_url"):
        if column not in columns:
            db.execute(f"ALTER TABLE sources ADD COLUMN {column} TEXT")


def _migrate_1_to_2(db: sqlite3.Connection, terms: TermDictionary) -> None:
    """Schema 1 -> 2 (inside the caller's transaction): BM25 moves from an FTS5 table to term
    ids stored with each chunk; every chunk is tokenized once here."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)").fetchall()}
    if "terms" not in columns:
        db.execute("ALTER TABLE chunks ADD COLUMN terms BLOB NOT NULL DEFAULT x''")
        db.execute("ALTER TABLE chunks ADD COLUMN term_count INTEGER NOT NULL DEFAULT 0")
    db.execute("DROP TRIGGER IF EXISTS chunks_ai")
    db.execute("DROP TRIGGER IF EXISTS chunks_ad")
    db.execute("DROP TABLE IF EXISTS chunks_fts")
    db.execute("CREATE TRIGGER chunks_ad AFTER DELETE ON chunks BEGIN"
               " INSERT INTO chunk_tombstones(chunk_id) VALUES (old.id); END")
    last = 0
    while True:
        rows = db.execute("SELECT id, breadcrumb, text FROM chunks WHERE id > ? ORDER BY id"
                          " LIMIT 2000", (last,)).fetchall()
        if not rows:
            break
        encoded, _ = terms.encode(db, [(r[1], r[2]) for r in rows])
        db.executemany("UPDATE chunks SET terms = ?, term_count = ? WHERE id = ?",
                       [(e.blob, e.length, r[0]) for e, r in zip(encoded, rows, strict=True)])
        last = int(rows[-1][0])
    db.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def _migrate_2_to_3(db: sqlite3.Connection) -> None:
    """Schema 2 -> 3 (inside the caller's transaction): community reports record the table
    rows they were built from (``community_row_sources``). For reports built before, the rows
    their members link to now are recorded, and every namespace with communities is marked
    for a graph rebuild, which records the exact set."""
    db.execute(
        "INSERT OR IGNORE INTO community_row_sources SELECT DISTINCT cm.community_id, d.doc_id,"
        " d.origin_source, d.origin_schema, d.origin_table, d.origin_pk_column,"
        " d.origin_pk_value FROM community_members cm"
        " JOIN chunk_entities ce ON ce.entity_id = cm.entity_id"
        " JOIN chunks c ON c.id = ce.chunk_id JOIN documents d ON d.id = c.document_id"
        " WHERE d.origin_source IS NOT NULL"
    )
    db.execute("UPDATE namespaces SET graph_dirty = 1"
               " WHERE id IN (SELECT namespace_id FROM communities)")
    db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")




#: Media types whose documents gained structure the index lacks before schema 4.
RE_EXTRACTED_AT_4 = ("application/pdf",)


def _migrate_3_to_4(db: sqlite3.Connection) -> None:
    """Schema 3 -> 4 (inside the caller's transaction): chunks record the first and last page
    of their text and whether it was OCR'd; documents keep the metadata of their format.
    PDF documents forget their content hash, so the next build reads and extracts them
    again and gains pages and section paths; vectors of chunks whose embedded text did not
    change are reused then, as for any edited file."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(chunks)").fetchall()}
    for name, ddl in (("page_first", "INTEGER"), ("page_last", "INTEGER"),
                      ("ocr", "INTEGER NOT NULL DEFAULT 0")):
        if name not in columns:
            db.execute(f"ALTER TABLE chunks ADD COLUMN {name} {ddl}")
    if "metadata" not in {r[1] for r in db.execute("PRAGMA table_info(documents)")}:
        db.execute("ALTER TABLE documents ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'")
    marks = ",".join("?" * len(RE_EXTRACTED_AT_4))
    db.execute(f"UPDATE documents SET content_hash = '' WHERE kind = 'document'"
               f" AND media_type IN ({marks})", RE_EXTRACTED_AT_4)
    db.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")


#: Media types whose documents carried their attachments as sections before schema 5.
RE_EXTRACTED_AT_5 = ("message/rfc822", "application/mbox")


def _add_document_parents(db: sqlite3.Connection) -> None:
    """Give ``documents`` its ``parent_id`` column (an attachment's mail) and its index
    where the file lacks them (nullable: documents written before have no parent)."""
    if "parent_id" not in {r[1] for r in db.execute("PRAGMA table_info(documents)")}:
        db.execute("ALTER TABLE documents ADD COLUMN parent_id INTEGER"
                   " REFERENCES documents(id) ON DELETE CASCADE")
    db.execute("CREATE INDEX IF NOT EXISTS documents_parent ON documents(parent_id)"
               " WHERE parent_id IS NOT NULL")


def _migrate_4_to_5(db: sqlite3.Connection) -> None:
    """Schema 4 -> 5 (inside the caller's transaction): a mail's attachments become
    documents of their own, linked to their mail by ``documents.parent_id``. Mail
    documents forget their content hash, so the next build reads them again and writes
    their attachments apart (vectors of unchanged embedded texts are reused)."""
    _add_document_parents(db)
    marks = ",".join("?" * len(RE_EXTRACTED_AT_5))
    db.execute(f"UPDATE documents SET content_hash = '' WHERE kind = 'document'"
               f" AND media_type IN ({marks})", RE_EXTRACTED_AT_5)
    db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")


def _migrate_5_to_6(db: sqlite3.Connection) -> None:
    """Schema 5 -> 6 (inside the caller's transaction): chunk vectors are stored as float16
    (:mod:`docgraph.store.sqlite.vectors`), converted in place from float32 without
    re-embedding. The freed pages stay in the file for later writes (``VACUUM`` returns
    them to the file system). The catalog gets a new identity, which retires any sidecar
    of the index (``docgraph.store.sqlite.index``)."""
    stored = db.execute("SELECT value FROM meta WHERE key = 'vector_dtype'").fetchone()
    if stored is None:  # written before schema 6: float32 (a file that says so is not)
        db.create_function("docgraph_f32_to_stored", 1, float32_to_stored, deterministic=True)
        db.execute("UPDATE chunks SET vector = docgraph_f32_to_stored(vector)")
        db.execute("INSERT INTO meta VALUES ('vector_dtype', ?)", (STORED.str,))
        # Rows rewritten in place: a new identity, so no sidecar of the old rows is used.
        db.execute("DELETE FROM meta WHERE key = 'catalog_id'")
    db.execute("UPDATE meta SET value = '6' WHERE key = 'schema_version'")


def _add_line_fingerprints(db: sqlite3.Connection) -> None:
    """Give ``documents`` the fingerprints of its lines and those dropped as repeated across
    its source where the file lacks them (nullable: a document written before counts no
    line until it is read again; no version step needed)."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(documents)")}
    if "line_hashes" not in columns:
        db.execute("ALTER TABLE documents ADD COLUMN line_hashes TEXT")
    if "lines_dropped" not in columns:
        db.execute("ALTER TABLE documents ADD COLUMN lines_dropped TEXT NOT NULL DEFAULT '[]'")
