"""The PostgreSQL catalog: documents, chunks (with their embeddings and BM25 postings,
kept by triggers), sources and failures in one database, one connection per thread.

The chunk index over these tables is :mod:`docgraph.store.postgres.index`. Every value is a
bound parameter; the only interpolated values are integers and fixed identifiers.
"""

from __future__ import annotations

import contextlib
import select
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from docgraph.errors import StoreError, StoreUnavailable
from docgraph.languages import ENGLISH, language_terms
from docgraph.model import Vector
from docgraph.store.base import DocumentWrite
from docgraph.store.postgres.pending import PostgresPendingVectors
from docgraph.store.postgres.schema import (
    MIGRATION_LOCK_KEY,
    MIGRATIONS,
    SCHEMA_VERSION,
    drop_hnsw_index_statements,
    hnsw_index_statements,
)
from docgraph.store.sql.dialect import POSTGRES, Dialect
from docgraph.store.sql.documents import ChunkRows, SqlCatalogDocuments

_INSERT_BATCH = 400  # chunk rows per INSERT statement (15 parameters each)
_MAX_UNASKED_READS = 4  # reads of what an idle connection's server sent before giving up


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


#: libpq URL parameters that carry a secret (``?password=...`` works like the user info's).
_SECRET_PARAMETERS = frozenset({"password", "sslpassword"})


def redacted(url: str) -> str:
    """``url`` without its password (in the user info or as a ``password`` /
    ``sslpassword`` parameter), for messages and status."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        # The hosts as written: a libpq multi-host URL (h1:5432,h2:5432) has no single port.
        netloc = f"{parts.username}:***@{netloc.rpartition('@')[2]}"
    query = "&".join(
        f"{name}=***" if name.lower() in _SECRET_PARAMETERS else pair
        for pair in parts.query.split("&") if pair
        for name in (pair.partition("=")[0],))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _closed_by_server(conn: Any) -> bool:
    """Whether idle connection ``conn`` was closed by its server.

    An idle autocommit connection has nothing to read; when its socket is readable the
    server sent something unasked: usually the error and end of a terminated session
    (``57P01`` on shutdown), else a notice. Reading it tells the two apart (a notice leaves
    the connection usable). A ``select`` of a socket, no round trip; a connection inside
    a transaction is never looked at (replacing it would lose the transaction)."""
    import psycopg
    from psycopg.pq import ConnStatus, TransactionStatus

    if conn.info.transaction_status != TransactionStatus.IDLE:
        return False
    for _ in range(_MAX_UNASKED_READS):  # the error, then the end of the stream
        try:
            readable, _, _ = select.select([conn.fileno()], [], [], 0)
            if not readable:
                return False
            conn.pgconn.consume_input()
        except (OSError, ValueError, psycopg.Error):
            return True
        if conn.pgconn.status != ConnStatus.OK:
            return True
    return False


def in_transaction(conn: Any) -> bool:
    """Whether psycopg connection ``conn`` is inside a transaction (or a failed one)."""
    from psycopg.pq import TransactionStatus

    return bool(conn.info.transaction_status != TransactionStatus.IDLE)


class PostgresCatalog(SqlCatalogDocuments, PostgresPendingVectors):
    """The catalog in a PostgreSQL database; safe to share between threads (one connection
    per thread). The document write is shared (:class:`SqlCatalogDocuments`: a batch in one
    transaction, a savepoint per document); this class stores its chunk rows
    (:class:`_ChunkRows`: the ``vector`` column) and keeps the HNSW index per dimension."""

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
        #: Transactions committed through :meth:`transaction` (not :meth:`unmarked`): a
        #: replica read waits until it has replayed past them (read-your-writes,
        #: :mod:`docgraph.store.postgres.replicas`). Read without a lock: a stale value
        #: only makes one read wait for the write before.
        self.writes = 0
        self._migrate()

    # -- connections -------------------------------------------------------

    def _connect(self) -> Any:
        import psycopg
        from pgvector.psycopg import register_vector

        try:
            conn = psycopg.connect(self.url, autocommit=True)
        except psycopg.OperationalError as exc:  # down, restarting, unreachable: retry later
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {self.display_url}: "
                                   f"{exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.display_url}: {exc}") from exc
        # Before the first migration the extension does not exist; _migrate registers then.
        with contextlib.suppress(psycopg.ProgrammingError):
            register_vector(conn)
        return conn

    def connection(self) -> Any:
        """This thread's connection (autocommit; use :meth:`transaction` to write).

        An idle connection the server has closed meanwhile (a restart, an administrator's
        shutdown) is replaced here, before a statement fails on it: after PostgreSQL comes
        back, each thread's first request succeeds instead of failing once on the stale
        connection it kept through the outage."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed and _closed_by_server(conn):
            with contextlib.suppress(Exception):
                conn.close()
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
        self.writes += 1

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads on this thread that see one snapshot of the database (a read-only
        ``REPEATABLE READ`` transaction), for figures computed from several statements: a
        caller's counts are totals less what it may not read, and a build committed between
        the two must not show in one and not the other. Inside a transaction already: that
        one."""
        conn = self.connection()
        if in_transaction(conn):
            yield
            return
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    @contextmanager
    def unmarked_transaction(self) -> Iterator[Any]:
        """A :meth:`transaction` whose writes no query reads (traces, audit, sessions,
        tokens, sign-in buckets, the policy's heartbeats): replica reads do not wait for
        them."""
        conn = self.connection()
        with conn.transaction():
            yield conn

    def unmarked(self) -> UnmarkedDatabase:
        """This catalog as the database of a store whose writes no query reads."""
        return UnmarkedDatabase(self)

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

    # -- hooks of the shared document write ----------------------------------

    def _vector_dimension(self) -> int:
        """The recorded model's dimension (read per write: another process may have reset
        it); the HNSW index is built for it."""
        model = self.embedding_model()
        if model is None:
            raise StoreError("no embedding model recorded: index a folder first")
        return model[1]

    def _chunk_rows(self, units: Sequence[Sequence[DocumentWrite]]) -> ChunkRows:
        """A batch's chunk rows: the ``embedding`` column; lexemes and postings come from
        the chunk triggers."""
        return _ChunkRows()

    def _drop_vector_index(self, db: Any) -> None:
        """Drop the HNSW index of the recorded dimension (made again with the next model)."""
        model = self.embedding_model()  # on this thread's connection: inside the transaction
        if model is not None:
            for statement in drop_hnsw_index_statements(model[1]):
                db.execute(statement)

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
            " WHERE n.name = %s AND d.doc_id = %s AND c.embed_hash = ANY(%s)"
            " AND c.embedding IS NOT NULL",
            (namespace, doc_id, wanted),
        ).fetchall()
        return {str(h): _array(v) for h, v in rows}


class UnmarkedDatabase:
    """A :class:`PostgresCatalog`'s connections for a store whose writes no query reads:
    its transactions are :meth:`PostgresCatalog.unmarked_transaction`, so a lookup that
    writes its traces and audit record does not make the next lookup wait for a replica."""

    dialect: Dialect = POSTGRES

    def __init__(self, catalog: PostgresCatalog) -> None:
        self.catalog = catalog

    def connection(self) -> Any:
        """The catalog's connection of this thread."""
        return self.catalog.connection()

    def transaction(self) -> contextlib.AbstractContextManager[Any]:
        """A transaction that does not mark a write for replica reads to wait for."""
        return self.catalog.unmarked_transaction()


class _ChunkRows:
    """The chunk rows of one batch on PostgreSQL: ``INSERT`` statements of up to
    ``_INSERT_BATCH`` rows (the statement-level lexical triggers run once per statement)."""

    def begin(self, db: Any) -> None:
        """Nothing to prepare."""

    def insert(self, db: Any, position: int, document_id: int, ns_id: int,
               write: DocumentWrite, hashes: Sequence[str]) -> None:
        """The write's chunk rows with their vectors in the ``embedding`` column."""
        rows: list[tuple[Any, ...]] = []
        language = write.language
        missing = write.missing if write.missing is not None else [False] * len(write.chunks)
        for chunk, crumb, embed_hash, vector, pending in zip(
            write.chunks, write.breadcrumbs, hashes, write.vectors, missing, strict=True
        ):
            rows.append((
                document_id, ns_id, chunk.index, chunk.text, crumb,
                _json_list(chunk.section_path), chunk.token_count, chunk.prev_index,
                chunk.next_index, chunk.parent_index, embed_hash,
                None if pending else np.asarray(vector, dtype=np.float32),  # NULL: pending
                *(chunk.pages or (None, None)),
                chunk.ocr, None if language == ENGLISH else own_terms(crumb, chunk.text,
                                                                      language),
            ))
            if len(rows) >= _INSERT_BATCH:
                _insert_chunks(db, rows)
                rows = []
        _insert_chunks(db, rows)

    def failed(self, db: Any, units_written: int) -> None:
        """Nothing to undo: the savepoint rolled the triggers' postings back too."""

    def committed(self) -> None:
        """Nothing to cache."""


def _array(value: Any) -> Vector:
    """A float32 array from a loaded ``vector`` value (pgvector's ``Vector`` or an array)."""
    to_numpy = getattr(value, "to_numpy", None)
    return np.asarray(to_numpy() if callable(to_numpy) else value, dtype=np.float32)


def _json_list(values: Sequence[str]) -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb(list(values))


def own_terms(breadcrumb: str, text: str, language: str) -> str:
    """A chunk's ``lexical`` column (migration 21) as ``tsvector`` input: the terms of its
    breadcrumb and text in ``language`` (:func:`docgraph.languages.language_terms`, as the
    embedded store counts them), each with one position per occurrence (the triggers take
    the positions' count as the term frequency; ``tsvector`` keeps at most 256)."""
    counts = Counter(language_terms(breadcrumb, language)[0])
    counts.update(language_terms(text, language)[0])
    # Terms are runs of letters and digits: no quote or backslash to escape. A lexeme has
    # at most 2047 bytes (to_tsvector skips longer words the same way) and at least one:
    # an empty one is a tsvector syntax error that would fail the document's write.
    return " ".join(f"'{term}':" + ",".join(str(p) for p in range(1, min(n, 256) + 1))
                    for term, n in counts.items() if 0 < len(term.encode()) < 2047)


def _insert_chunks(db: Any, rows: list[tuple[Any, ...]]) -> None:
    """One INSERT for many chunk rows (statement-level triggers then run once)."""
    if not rows:
        return
    values = ",".join(["(" + ", ".join(["%s"] * 15) + ", %s::tsvector)"] * len(rows))
    db.execute(
        "INSERT INTO chunks(document_id, namespace_id, chunk_index, text, breadcrumb,"
        " section_path, token_count, prev_index, next_index, parent_index, embed_hash,"
        f" embedding, page_first, page_last, ocr, lexical) VALUES {values}",
        [value for row in rows for value in row],
    )


# A query whose terms have at most this many postings in all is scored in one pass over them;
# above it, MaxScore pruning (bench/backends.py: 1M chunks).
