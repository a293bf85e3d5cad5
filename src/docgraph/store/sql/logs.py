"""Retrieval traces and the audit log, written once for every relational backend.

The tables are the backend's (SQLite: :func:`docgraph.store.sqlite.logs.create_log_tables`;
PostgreSQL: migration 6): ``traces(id, created_at, user_id, payload)`` and
``audit_log(id, at, user_id, operation, outcome, payload)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from docgraph.store.base import TraceEntry
from docgraph.store.logs import AUDIT_RETENTION, TRACE_RETENTION
from docgraph.store.sql.dialect import SqlDatabase, run


def _save_traces(database: SqlDatabase, db: Any, traces: Sequence[TraceEntry],
                 retention: int) -> None:
    """Store ``traces`` (each replacing one with the same id) inside the open transaction
    ``db``, then drop the oldest beyond ``retention`` (once, however many were stored)."""
    sql, dialect = database.dialect.sql, database.dialect
    for trace in traces:
        db.execute(sql(
            "INSERT INTO traces(id, created_at, user_id, payload) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
            " user_id = excluded.user_id, payload = excluded.payload"),
            (trace.trace_id, trace.created_at, str(trace.payload.get("user_id", "")),
             dialect.json_param(dict(trace.payload))))
    if traces:
        db.execute(sql("DELETE FROM traces WHERE id NOT IN (SELECT id FROM"
                       " (SELECT id FROM traces ORDER BY created_at DESC, id LIMIT ?) keep)"),
                   (retention,))


class SqlTraceLog:
    """The :class:`~docgraph.store.base.TraceLog` port on a relational catalog."""

    def __init__(self, database: SqlDatabase, retention: int = TRACE_RETENTION) -> None:
        self.database = database
        self.retention = retention

    def save(self, trace_id: str, created_at: float, payload: Mapping[str, Any]) -> None:
        """Store one trace (replacing one with the same id) and drop the oldest beyond the
        retention bound."""
        with self.database.transaction() as db:
            _save_traces(self.database, db, [TraceEntry(trace_id, created_at, payload)],
                         self.retention)

    def get(self, trace_id: str, user_id: str | None = None) -> dict[str, Any] | None:
        """A trace by id, or the newest for ``last``; with ``user_id``, only that caller's."""
        clauses, params = ([], []) if trace_id == "last" else (["id = ?"], [trace_id])
        if user_id is not None:
            clauses.append("user_id = ?")
            params.append(user_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        row = run(self.database,
                  f"SELECT payload FROM traces {where} ORDER BY created_at DESC, id LIMIT 1",
                  params).fetchone()
        return None if row is None else dict(self.database.dialect.json_value(row[0]))

    def count(self) -> int:
        """Stored traces."""
        return int(run(self.database, "SELECT count(*) FROM traces").fetchone()[0])

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest traces first (each payload with its ``id``)."""
        rows = run(self.database, "SELECT id, payload FROM traces"
                                  " ORDER BY created_at DESC, id LIMIT ?", (limit,)).fetchall()
        return [{**dict(self.database.dialect.json_value(r[1])), "id": str(r[0])}
                for r in rows]


class SqlAuditStore:
    """The :class:`~docgraph.store.base.AuditStore` port on a relational catalog."""

    def __init__(self, database: SqlDatabase, retention: int = AUDIT_RETENTION,
                 trace_retention: int = TRACE_RETENTION) -> None:
        self.database = database
        self.retention = retention
        self.trace_retention = trace_retention

    def append(self, at: float, user_id: str, operation: str, outcome: str,
               payload: Mapping[str, Any], traces: Sequence[TraceEntry] = ()) -> None:
        """Append one record and drop the oldest beyond the retention bound; the request's
        ``traces`` are stored in the same transaction (:meth:`SqlTraceLog.save`)."""
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            _save_traces(self.database, db, traces, self.trace_retention)
            row = db.execute(sql(
                "INSERT INTO audit_log(at, user_id, operation, outcome, payload)"
                " VALUES (?, ?, ?, ?, ?) RETURNING id"),
                (at, user_id, operation, outcome,
                 self.database.dialect.json_param(dict(payload)))).fetchone()
            oldest_kept = int(row[0]) - self.retention
            if oldest_kept > 0:  # ids start at 1: nothing to drop before that
                db.execute(sql("DELETE FROM audit_log WHERE id <= ?"), (oldest_kept,))

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records first."""
        rows = run(self.database, "SELECT payload FROM audit_log ORDER BY id DESC LIMIT ?",
                   (limit,)).fetchall()
        return [dict(self.database.dialect.json_value(r[0])) for r in rows]
