"""Retrieval traces and the audit log in the PostgreSQL database (migration 6), shared by
every server of the database."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from docgraph.store.logs import AUDIT_RETENTION, TRACE_RETENTION
from docgraph.store.postgres.catalog import PostgresCatalog


class PostgresTraceLog:
    """Traces in the PostgreSQL database (migration 6), shared by every server."""

    def __init__(self, catalog: PostgresCatalog, retention: int = TRACE_RETENTION) -> None:
        self.catalog = catalog
        self.retention = retention

    def save(self, trace_id: str, created_at: float, payload: Mapping[str, Any]) -> None:
        """Store one trace and drop the oldest beyond the retention bound."""
        from psycopg.types.json import Jsonb

        with self.catalog.transaction() as db:
            db.execute("INSERT INTO traces VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE"
                       " SET created_at = excluded.created_at, user_id = excluded.user_id,"
                       " payload = excluded.payload",
                       (trace_id, created_at, str(payload.get("user_id", "")),
                        Jsonb(dict(payload))))
            db.execute("DELETE FROM traces WHERE id NOT IN"
                       " (SELECT id FROM traces ORDER BY created_at DESC, id LIMIT %s)",
                       (self.retention,))

    def get(self, trace_id: str, user_id: str | None = None) -> dict[str, Any] | None:
        """A trace by id, or the newest for ``last``; with ``user_id``, only that caller's."""
        where, params = ("", []) if trace_id == "last" else ("WHERE id = %s", [trace_id])
        if user_id is not None:
            where = (where + " AND" if where else "WHERE") + " user_id = %s"
            params.append(user_id)
        row = self.catalog.connection().execute(
            f"SELECT payload FROM traces {where} ORDER BY created_at DESC, id LIMIT 1",
            params).fetchone()
        return None if row is None else dict(row[0])

    def count(self) -> int:
        """Stored traces."""
        return int(self.catalog.connection().execute("SELECT count(*) FROM traces")
                   .fetchone()[0])


class PostgresAuditStore:
    """Audit records in the PostgreSQL database (migration 6), shared by every server."""

    def __init__(self, catalog: PostgresCatalog, retention: int = AUDIT_RETENTION) -> None:
        self.catalog = catalog
        self.retention = retention

    def append(self, at: float, user_id: str, operation: str, outcome: str,
               payload: Mapping[str, Any]) -> None:
        """Append one record and drop the oldest beyond the retention bound."""
        from psycopg.types.json import Jsonb

        with self.catalog.transaction() as db:
            row = db.execute("INSERT INTO audit_log(at, user_id, operation, outcome, payload)"
                             " VALUES (%s, %s, %s, %s, %s) RETURNING id",
                             (at, user_id, operation, outcome, Jsonb(dict(payload)))).fetchone()
            db.execute("DELETE FROM audit_log WHERE id <= %s", (int(row[0]) - self.retention,))

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records first."""
        rows = self.catalog.connection().execute(
            "SELECT payload FROM audit_log ORDER BY id DESC LIMIT %s", (limit,)).fetchall()
        return [dict(r[0]) for r in rows]
