"""Retrieval traces and the audit log, written once for every relational backend.

The tables are the backend's (SQLite: :func:`docgraph.store.sqlite.logs.create_log_tables`;
PostgreSQL: migration 6): ``traces(id, created_at, user_id, payload)`` and
``audit_log(id, at, user_id, operation, outcome, payload)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from docgraph.store.base import TraceEntry
from docgraph.store.logs import AUDIT_RETENTION, TRACE_RETENTION
from docgraph.store.sql.dialect import SqlDatabase, run


class _Pruning:
    """When a writer of traces drops the oldest beyond the retention bound: on its first
    write (catching up after a restart), then once every ``retention // 10`` writes. The
    drop sorts the kept window, so doing it on every request would cost a statement and a
    sort per request; between drops the table holds at most a tenth more per writer."""

    def __init__(self, retention: int) -> None:
        self.retention = retention
        self._every = max(1, retention // 10)
        self._writes = itertools.count()  # next() is atomic under the GIL

    def due(self) -> bool:
        """Whether this write drops the oldest."""
        return next(self._writes) % self._every == 0


def _save_traces(database: SqlDatabase, db: Any, traces: Sequence[TraceEntry],
                 pruning: _Pruning) -> None:
    """Store ``traces`` (each replacing one with the same id) inside the open transaction
    ``db``, then, when ``pruning`` says so, drop the oldest beyond its retention (once,
    however many were stored)."""
    sql, dialect = database.dialect.sql, database.dialect
    for trace in traces:
        db.execute(sql(
            "INSERT INTO traces(id, created_at, user_id, payload) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (id) DO UPDATE SET created_at = excluded.created_at,"
            " user_id = excluded.user_id, payload = excluded.payload"),
            (trace.trace_id, trace.created_at, str(trace.payload.get("user_id", "")),
             dialect.json_param(dict(trace.payload))))
    if traces and pruning.due():
        db.execute(sql("DELETE FROM traces WHERE id NOT IN (SELECT id FROM"
                       " (SELECT id FROM traces ORDER BY created_at DESC, id LIMIT ?) keep)"),
                   (pruning.retention,))


class SqlTraceLog:
    """The :class:`~docgraph.store.base.TraceLog` port on a relational catalog."""

    def __init__(self, database: SqlDatabase, retention: int = TRACE_RETENTION) -> None:
        self.database = database
        self.retention = retention
        self._pruning = _Pruning(retention)

    def save(self, trace_id: str, created_at: float, payload: Mapping[str, Any]) -> None:
        """Store one trace (replacing one with the same id); the oldest beyond the
        retention bound are dropped every tenth of it (see :class:`_Pruning`)."""
        with self.database.transaction() as db:
            _save_traces(self.database, db, [TraceEntry(trace_id, created_at, payload)],
                         self._pruning)

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
        self._trace_pruning = _Pruning(trace_retention)

    def append(self, at: float, user_id: str, operation: str, outcome: str,
               payload: Mapping[str, Any], traces: Sequence[TraceEntry] = ()) -> None:
        """Append one record and drop the oldest beyond the retention bound; the request's
        ``traces`` are stored in the same transaction (:meth:`SqlTraceLog.save`; their
        retention is applied every tenth of it, see :class:`_Pruning`)."""
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            _save_traces(self.database, db, traces, self._trace_pruning)
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
