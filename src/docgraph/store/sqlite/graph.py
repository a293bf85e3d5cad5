"""The embedded catalog's side of the shared graph store
(:class:`docgraph.store.sql.graph.SqlGraphStore`): the hooks whose SQLite SQL or speed
differs. The graph tables themselves are in the catalog schema
(:mod:`docgraph.store.sqlite.schema`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from docgraph.model import Vector
from docgraph.store.lexical import EncodedTerms
from docgraph.store.sql.graph import (
    ReportDraft,
    SqlGraphStore,
    insert_report_document,
    report_section_path,
)
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.vectors import decode_vector, encode_vector

# Secondary indexes of entity_edges (as created by the catalog schema), rebuilt around bulk
# edge writes.
_EDGE_INDEXES = (("entity_edges_target", "target, source"),
                 ("entity_edges_namespace", "namespace_id"))
INDEX_REBUILD_MIN_EDGES = 10_000  # below this, updating the indexes row by row is as fast


class SQLiteGraphBackend:
    """Graph hooks of the embedded catalog: vectors as float32 BLOBs with BM25 term blobs,
    a deferred ``BEGIN`` as read snapshot (WAL readers never block), community ids from
    ``max(id) + 1`` under the write lock, and edge indexes rebuilt around bulk writes."""

    binary = ""  # SQLite compares text byte-wise (BINARY collation)
    vector_column = "vector"

    def __init__(self, catalog: SQLiteCatalog) -> None:
        self.catalog = catalog

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection inside one read transaction (or the caller's)."""
        db = self.catalog.connection()
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")
        try:
            yield db
        finally:
            if own:
                db.execute("COMMIT")

    def write_edges(self, db: sqlite3.Connection,
                    rows: Sequence[tuple[int, int, int, float, int]],
                    others: Callable[[], int]) -> None:
        """Insert edge rows; rebuilding the secondary indexes in one sort beats updating
        them row by row when this namespace brings most of the table's edges."""
        rebuild = len(rows) > INDEX_REBUILD_MIN_EDGES and len(rows) > others()
        if rebuild:
            for name, _ in _EDGE_INDEXES:
                db.execute(f"DROP INDEX IF EXISTS {name}")
        db.executemany("INSERT INTO entity_edges(namespace_id, source, target, weight, chunks)"
                       " VALUES (?, ?, ?, ?, ?)", rows)
        if rebuild:
            for name, columns in _EDGE_INDEXES:
                db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON entity_edges({columns})")

    def community_ids(self, db: sqlite3.Connection, count: int) -> list[int]:
        """Consecutive ids after the largest (the transaction holds the write lock)."""
        first = int(db.execute("SELECT coalesce(max(id), 0) + 1 FROM communities").fetchone()[0])
        return list(range(first, first + count))

    def insert_reports(self, db: sqlite3.Connection, ns_id: int,
                       reports: Sequence[ReportDraft], now: float) -> Callable[[], None]:
        """Each report's document and chunk (vector BLOB and BM25 terms); the new term ids
        are cached after the commit."""
        encoded, learnt = self.catalog.terms.encode(
            db, [(r.breadcrumb, r.text) for r in reports])
        for report, lexical in zip(reports, encoded, strict=True):
            self._insert_report(db, ns_id, report, lexical, now)
        return lambda: self.catalog.terms.committed(learnt)

    @staticmethod
    def _insert_report(db: sqlite3.Connection, ns_id: int, report: ReportDraft,
                       lexical: EncodedTerms, now: float) -> None:
        """One community report: a document of kind ``community_report`` with one chunk."""
        document = insert_report_document(SQLiteCatalog.dialect, db, ns_id, report, now)
        db.execute(
            "INSERT INTO chunks(document_id, namespace_id, chunk_index, kind, text,"
            " breadcrumb, section_path, token_count, prev_index, next_index,"
            " parent_index, embed_hash, vector, terms, term_count)"
            " VALUES (?, ?, 0, 'community_report', ?, ?, ?, 0, NULL, NULL, NULL, ?, ?, ?, ?)",
            (document, ns_id, report.text, report.breadcrumb,
             json.dumps(report_section_path(report)), report.stored_hash,
             encode_vector(report.vector), lexical.blob,
             lexical.length),
        )

    def decode_vector(self, raw: bytes) -> Vector:
        """A stored vector BLOB as a float32 array."""
        return decode_vector(raw)


class SQLiteGraphStore(SqlGraphStore):
    """The shared graph store on a :class:`SQLiteCatalog` file."""

    def __init__(self, catalog: SQLiteCatalog) -> None:
        super().__init__(catalog, SQLiteGraphBackend(catalog))
