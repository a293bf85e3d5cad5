"""The PostgreSQL catalog: documents, chunks (with their embeddings and BM25 postings,
kept by triggers), sources and failures in one database, one connection per thread.

The chunk index over these tables is :mod:`docgraph.store.postgres.index`. Every value is a
bound parameter; the only interpolated values are integers and fixed identifiers.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from docgraph.errors import StoreError
from docgraph.model import (
    DocumentRecord,
    RowOrigin,
    StoredChunk,
    Vector,
)
from docgraph.store.base import (
    DocumentWrite,
)
from docgraph.store.postgres.schema import (
    MIGRATION_LOCK_KEY,
    MIGRATIONS,
    SCHEMA_VERSION,
    drop_hnsw_index_statements,
    hnsw_index_statements,
)
from docgraph.store.sql.catalog import SqlCatalogRecords
from docgraph.store.sql.dialect import POSTGRES, Dialect
from docgraph.store.sql.graph import write_links
from docgraph.text import text_hash

_INSERT_BATCH = 400  # chunk rows per INSERT statement (15 parameters each)


def hnsw_build_memory_mb(rows: int, dimension: int) -> int:
    """``maintenance_work_mem`` for building the HNSW index over ``rows`` vectors: the graph
    must fit in it or pgvector's build slows to a crawl (a 1M x 384 build with 512 MB did
    451k rows in 13 min). Vectors plus ~2x for the graph, between 512 MB and 8 GB."""
    need = rows * dimension * 4 * 3 // 2**20
    return int(min(max(need, 512), 8192))


def connection_url(url: str) -> str:
    """A libpq URL from a ``postgresql://``, ``postgres://`` or SQLAlchemy-style
    ``postgresql+psycopg://`` URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0].lower()
    if scheme not in ("postgresql", "postgres"):
        raise StoreError(f"not a PostgreSQL URL (postgresql://...): scheme {parts.scheme!r}")
    return urlunsplit(("postgresql", *parts[1:]))


def redacted(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, *parts[2:]))


class PostgresCatalog(SqlCatalogRecords):
    """The catalog in a PostgreSQL database; safe to share between threads (one connection
    per thread, every document write one transaction)."""

    dialect: Dialect = POSTGRES

    def __init__(self, url: str) -> None:
        try:
            import pgvector.psycopg  # noqa: F401
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise StoreError(
                "store.backend = 'postgres' needs the 'postgres' extra: "
                "pip install 'docgraph[postgres]'"
            ) from exc
        self.url = connection_url(url)
        self.display_url = redacted(self.url)
        self._local = threading.local()
        self._connections: list[Any] = []
        self._connections_lock = threading.Lock()
        self._migrate()

    # -- connections -------------------------------------------------------

    def _connect(self) -> Any:
        import psycopg
        from pgvector.psycopg import register_vector

        try:
            conn = psycopg.connect(self.url, autocommit=True)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.display_url}: {exc}") from exc
        # Before the first migration the extension does not exist; _migrate registers then.
        with contextlib.suppress(psycopg.ProgrammingError):
            register_vector(conn)
        return conn

    def connection(self) -> Any:
        """This thread's connection (autocommit; use :meth:`transaction` to write)."""
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._connect()
            self._local.conn = conn
            with self._connections_lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A transaction on this thread's connection: commits on success, rolls back on error."""
        conn = self.connection()
        with conn.transaction():
            yield conn

    def close(self) -> None:
        """Close every connection opened by any thread."""
        with self._connections_lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()

    def _migrate(self) -> None:
        import psycopg
        from pgvector.psycopg import register_vector

        conn = self.connection()
        try:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version integer PRIMARY KEY, applied_at double precision NOT NULL)"
                )
                row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
                current = int(row[0] or 0)
                if current > SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.display_url}: schema version {current} is newer than this "
                        f"docgraph supports ({SCHEMA_VERSION})"
                    )
                for version in range(current + 1, SCHEMA_VERSION + 1):
                    for statement in MIGRATIONS[version - 1]:
                        conn.execute(statement)
                    conn.execute("INSERT INTO schema_migrations VALUES (%s, %s)",
                                 (version, time.time()))
        except psycopg.Error as exc:
            raise StoreError(f"{self.display_url}: cannot create the docgraph schema: "
                             f"{exc}") from exc
        register_vector(conn)

    def schema_version(self) -> int:
        """The migration version the database is at."""
        row = self.connection().execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    # -- model -------------------------------------------------------------

    def set_embedding_model(self, name: str, dimension: int) -> None:
        """Record the embedding model and create the HNSW index for its dimension."""
        if not 1 <= dimension <= 4000:
            raise StoreError(f"pgvector's HNSW index of halfvec takes 1 to 4000 dimensions, "
                             f"not {dimension}")
        with self.transaction() as db:
            for key, value in (("embed_model", name), ("embed_dimension", str(dimension))):
                db.execute(
                    "INSERT INTO meta VALUES (%s, %s) ON CONFLICT (key) DO UPDATE"
                    " SET value = excluded.value", (key, value)
                )
            for statement in hnsw_index_statements(dimension):
                db.execute(statement)

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """Load many documents faster: the HNSW index is dropped for the duration and built
        once at the end (pgvector builds an index far faster than it absorbs inserts one by
        one), then the postings are vacuumed. Dense search is exact meanwhile; lexical
        statistics stay transactional."""
        model = self.embedding_model()
        if model is None:
            raise StoreError("no embedding model recorded: set it before a bulk load")
        with self.transaction() as db:
            for statement in drop_hnsw_index_statements(model[1]):
                db.execute(statement)
        try:
            yield
        finally:
            db = self.connection()
            (rows,) = db.execute("SELECT coalesce(sum(n), 0) FROM chunk_counts").fetchone()
            memory_mb = hnsw_build_memory_mb(int(rows), model[1])
            db.execute(f"SET maintenance_work_mem = '{memory_mb}MB'")
            for statement in hnsw_index_statements(model[1]):
                db.execute(statement)
            db.execute("RESET maintenance_work_mem")
            db.execute("ANALYZE chunks")
            # Mark the new postings' pages all-visible, so BM25 reads them from the index
            # alone (index-only scans) from the first query on, not after autovacuum.
            db.execute("VACUUM (ANALYZE) postings")

    def _dimension(self) -> int:
        model = self.embedding_model()  # read per write: another process may have reset it
        if model is None:
            raise StoreError("no embedding model recorded: index a folder first")
        return model[1]

    # -- documents ---------------------------------------------------------

    def write_document(self, write: DocumentWrite) -> DocumentRecord:
        """Replace the document's row and every chunk in one transaction.

        Either the new version is fully stored or, on any error, the old version stays."""
        return self.import_document(write, [text_hash(t) for t in write.embedded_texts])

    def write_documents(self, writes: Sequence[DocumentWrite]) -> list[DocumentRecord]:
        """Write documents in order, each in its own transaction; the first failure keeps
        that document's old version, stops the batch and propagates."""
        return [self.write_document(write) for write in writes]

    def import_document(self, write: DocumentWrite, embed_hashes: Sequence[str]) -> DocumentRecord:
        """:meth:`write_document` with the embedded-text hashes given instead of computed
        (``write.embedded_texts`` is ignored): for copying an index whose embedded texts
        are known only by hash. The document's attachments are written in the same
        transaction (their hashes: ``embed_hashes`` of each, else of its embedded texts),
        and attachments it had before that are not among them are deleted."""
        units = [(write, embed_hashes)] + [
            (a, a.embed_hashes if a.embed_hashes is not None
             else [text_hash(t) for t in a.embedded_texts]) for a in write.attachments]
        for unit, hashes in units:
            _check_write(unit, hashes)
        dimension = self._dimension()
        now = time.time()
        with self.transaction() as db:
            ns_id = self._namespace_id(db, write.source.namespace)
            document_id = self._write_unit(db, ns_id, write, embed_hashes, dimension, now,
                                           None)
            for attachment, hashes in units[1:]:
                self._write_unit(db, ns_id, attachment, hashes, dimension, now, document_id)
            stale = self._stale_attachments(db, document_id,
                                            [a.path for a in write.attachments])
            if stale:
                db.execute("DELETE FROM chunks WHERE document_id = ANY(%s)", (stale,))
                db.execute("DELETE FROM documents WHERE id = ANY(%s)", (stale,))
            db.execute("DELETE FROM failures WHERE source_id = %s AND path = %s",
                       (write.source.id, write.path))
            db.execute("UPDATE namespaces SET graph_dirty = true WHERE id = %s", (ns_id,))
        return DocumentRecord(
            document_id, write.doc_id, write.source.id, write.source.namespace, write.path,
            write.title, write.content_hash, write.change_token, write.media_type,
            len(write.chunks), now, dict(write.metadata),
        )

    def _write_unit(self, db: Any, ns_id: int, write: DocumentWrite,
                    embed_hashes: Sequence[str], dimension: int, now: float,
                    parent_id: int | None) -> int:
        """One document row and its chunks and entity links (a file's document, or one of
        its attachments with ``parent_id`` its row); returns the row id."""
        chunks = list(write.chunks)
        document_id = self._upsert_document(db, write, ns_id, len(chunks), now, parent_id)
        db.execute("DELETE FROM chunks WHERE document_id = %s", (document_id,))
        rows: list[tuple[Any, ...]] = []
        for chunk, crumb, embed_hash, vector in zip(
            chunks, write.breadcrumbs, embed_hashes, write.vectors, strict=True
        ):
            if vector.shape != (dimension,) or not np.isfinite(vector).all():
                raise StoreError(f"{write.doc_id}#chunk-{chunk.index}: invalid vector")
            rows.append((
                document_id, ns_id, chunk.index, chunk.text, crumb,
                _json_list(chunk.section_path), chunk.token_count, chunk.prev_index,
                chunk.next_index, chunk.parent_index, embed_hash,
                np.asarray(vector, dtype=np.float32), *(chunk.pages or (None, None)),
                chunk.ocr,
            ))
            if len(rows) >= _INSERT_BATCH:
                _insert_chunks(db, rows)
                rows = []
        _insert_chunks(db, rows)
        if any(write.entity_links):
            rowids = dict(db.execute(
                "SELECT chunk_index, id FROM chunks WHERE document_id = %s", (document_id,)
            ).fetchall())
            write_links(self.dialect, db, ns_id, [
                (int(rowids[chunk.index]), link)
                for chunk, links in zip(chunks, write.entity_links, strict=True)
                for link in links
            ])
        return document_id

    def delete_document(self, document: DocumentRecord) -> None:
        """Delete a document, its chunks and its attachments in one transaction."""
        with self.transaction() as db:
            db.execute("DELETE FROM chunks WHERE document_id IN"
                       " (SELECT id FROM documents WHERE parent_id = %s)", (document.id,))
            db.execute("DELETE FROM documents WHERE parent_id = %s", (document.id,))
            db.execute("DELETE FROM chunks WHERE document_id = %s", (document.id,))
            db.execute("DELETE FROM documents WHERE id = %s", (document.id,))
            db.execute("UPDATE namespaces SET graph_dirty = true WHERE name = %s",
                       (document.namespace,))

    def reusable_vectors(
        self, namespace: str, doc_id: str, embedded_text_hashes: Iterable[str]
    ) -> dict[str, Vector]:
        """Vectors of this document's current chunks whose embedded text is unchanged."""
        wanted = list(set(embedded_text_hashes))
        if not wanted:
            return {}
        rows = self.connection().execute(
            "SELECT c.embed_hash, c.embedding FROM chunks c"
            " JOIN documents d ON d.id = c.document_id JOIN namespaces n ON n.id = d.namespace_id"
            " WHERE n.name = %s AND d.doc_id = %s AND c.embed_hash = ANY(%s)",
            (namespace, doc_id, wanted),
        ).fetchall()
        return {str(h): _array(v) for h, v in rows}

    # -- chunks ------------------------------------------------------------

    def chunks_by_rowid(self, rowids: Sequence[int]) -> dict[int, StoredChunk]:
        """Stored chunks (with document identity and title) for the given row ids."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        if not ids:
            return {}
        rows = self.connection().execute(
            "SELECT c.id, d.doc_id, n.name, c.chunk_index, c.text, c.section_path, d.title,"
            " d.path, c.prev_index, c.next_index, c.parent_index, d.origin_source,"
            " d.origin_schema, d.origin_table, d.origin_pk_column, d.origin_pk_value,"
            " c.page_first, c.page_last, c.ocr FROM chunks c"
            " JOIN documents d ON d.id = c.document_id"
            " JOIN namespaces n ON n.id = c.namespace_id WHERE c.id = ANY(%s)",
            (ids,),
        ).fetchall()
        return {
            int(r[0]): StoredChunk(
                rowid=int(r[0]), chunk_id=f"{r[1]}#chunk-{r[3]}", doc_id=r[1], namespace=r[2],
                index=int(r[3]), text=r[4], section_path=tuple(r[5]), title=r[6],
                source_path=r[7], prev_index=r[8], next_index=r[9], parent_index=r[10],
                origin=None if r[11] is None else RowOrigin(*r[11:16]),
                pages=None if r[16] is None else (int(r[16]), int(r[17])), ocr=bool(r[18]),
            )
            for r in rows
        }

    def clear_all_chunks(self) -> None:
        """Drop every chunk and forget content hashes, so the next build re-embeds all."""
        model = self.embedding_model()
        with self.transaction() as db:
            db.execute("DELETE FROM chunks")
            db.execute("UPDATE documents SET content_hash = '', change_token = '', chunk_count = 0")
            db.execute("DELETE FROM meta WHERE key IN ('embed_model', 'embed_dimension')")
            if model is not None:
                for statement in drop_hnsw_index_statements(model[1]):
                    db.execute(statement)


def _check_write(write: DocumentWrite, embed_hashes: Sequence[str]) -> None:
    """Reject a write whose chunks, hashes, vectors and entity links do not line up."""
    chunks = len(write.chunks)
    if not (chunks == len(write.breadcrumbs) == len(embed_hashes) == len(write.vectors)):
        raise StoreError(f"{write.doc_id}: {chunks} chunks but {len(write.vectors)} vectors")
    if write.entity_links and len(write.entity_links) != chunks:
        raise StoreError(f"{write.doc_id}: entity links for {len(write.entity_links)} of "
                         f"{chunks} chunks")


def _array(value: Any) -> Vector:
    """A float32 array from a loaded ``vector`` value (pgvector's ``Vector`` or an array)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if callable(to_numpy) else value, dtype=np.float32)


def _json_list(values: Sequence[str]) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(list(values))


def _insert_chunks(db: Any, rows: list[tuple[Any, ...]]) -> None:
    """One INSERT for many chunk rows (statement-level triggers then run once)."""
    if not rows:
        return
    values = ",".join(["(" + ", ".join(["%s"] * 15) + ")"] * len(rows))
    db.execute(
        "INSERT INTO chunks(document_id, namespace_id, chunk_index, text, breadcrumb,"
        " section_path, token_count, prev_index, next_index, parent_index, embed_hash,"
        f" embedding, page_first, page_last, ocr) VALUES {values}",
        [value for row in rows for value in row],
    )


# A query whose terms have at most this many postings in all is scored in one pass over them;
# above it, MaxScore pruning (bench/backends.py: 1M chunks).
