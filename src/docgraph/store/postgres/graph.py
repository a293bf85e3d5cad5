"""The PostgreSQL catalog's side of the shared graph store
(:class:`docgraph.store.sql.graph.SqlGraphStore`): the hooks whose SQL differs from SQLite.
The graph tables are migration 7 of :mod:`docgraph.store.postgres.schema`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from docgraph.model import Vector
from docgraph.store.postgres.catalog import PostgresCatalog, _array, _json_list
from docgraph.store.sql.graph import (
    ReportDraft,
    SqlGraphStore,
    insert_report_document,
    report_section_path,
)


class PostgresGraphBackend:
    """Graph hooks of the PostgreSQL catalog: report vectors in the ``embedding`` column
    (their lexemes and postings come from the chunk triggers), a REPEATABLE READ
    transaction as read snapshot, community ids from the table's sequence (concurrent
    builds of other namespaces never collide), edges written with ``COPY``, and text sorted
    by code point (``COLLATE "C"``) whatever the database's collation."""

    binary = ' COLLATE "C"'
    vector_column = "embedding"

    def __init__(self, catalog: PostgresCatalog) -> None:
        self.catalog = catalog

    @contextmanager
    def snapshot(self) -> Iterator[Any]:
        """This thread's connection inside one REPEATABLE READ read transaction (or the
        caller's transaction, if one is open)."""
        from psycopg.pq import TransactionStatus

        conn = self.catalog.connection()
        if conn.info.transaction_status != TransactionStatus.IDLE:
            yield conn
            return
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield conn

    def write_edges(self, db: Any, rows: Sequence[tuple[int, int, int, float, int]],
                    others: Callable[[], int]) -> None:
        """Copy the edge rows in (one ``COPY`` stream)."""
        if not rows:
            return
        with db.cursor() as cursor, cursor.copy(
            "COPY entity_edges (namespace_id, source, target, weight, chunks) FROM STDIN"
        ) as copy:
            for row in rows:
                copy.write_row(row)

    def community_ids(self, db: Any, count: int) -> list[int]:
        """``count`` values of the communities id sequence."""
        if count == 0:
            return []
        rows = db.execute(
            "SELECT nextval(pg_get_serial_sequence('communities', 'id'))"
            " FROM generate_series(1, %s)", (count,)).fetchall()
        return sorted(int(r[0]) for r in rows)

    def insert_reports(self, db: Any, ns_id: int, reports: Sequence[ReportDraft],
                       now: float) -> Callable[[], None]:
        """Each report's document, then every report chunk in one INSERT (the lexical
        triggers run once)."""
        rows: list[Any] = []
        for report in reports:
            document = insert_report_document(self.catalog.dialect, db, ns_id, report, now)
            rows.append((document, ns_id, report.text, report.breadcrumb,
                         _json_list(report_section_path(report)), report.stored_hash,
                         np.asarray(report.vector, dtype=np.float32)))
        for start in range(0, len(rows), 400):
            part = rows[start:start + 400]
            values = ",".join(["(%s, %s, 0, 'community_report', %s, %s, %s, 0, NULL, NULL,"
                               " NULL, %s, %s)"] * len(part))
            db.execute(
                "INSERT INTO chunks(document_id, namespace_id, chunk_index, kind, text,"
                " breadcrumb, section_path, token_count, prev_index, next_index,"
                f" parent_index, embed_hash, embedding) VALUES {values}",
                [value for row in part for value in row],
            )
        return lambda: None

    def decode_vector(self, raw: Any) -> Vector:
        """A loaded ``vector`` value as a float32 array."""
        return _array(raw)


class PostgresGraphStore(SqlGraphStore):
    """The shared graph store on a :class:`PostgresCatalog`."""

    def __init__(self, catalog: PostgresCatalog) -> None:
        super().__init__(catalog, PostgresGraphBackend(catalog))
