"""The two append-only logs every backend keeps: retrieval traces and the audit log.

Both are ports (:class:`~docgraph.store.base.TraceLog`, :class:`~docgraph.store.base.AuditStore`)
with one implementation per backend here. Rows are JSON payloads the callers shape (the
governed service hashes the query before anything reaches a log); each log keeps its newest
``retention`` rows. On PostgreSQL they live in the shared database, so every process serving
it writes and reads the same traces and audit records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from docgraph.store.sqlite import SQLiteCatalog

if TYPE_CHECKING:
    from docgraph.store.postgres import PostgresCatalog

TRACE_RETENTION = 1000
AUDIT_RETENTION = 100_000

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS traces_created ON traces(created_at);
CREATE TABLE IF NOT EXISTS audit_log (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    user_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    outcome TEXT NOT NULL,
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_log_at ON audit_log(at);
"""


def _owned_by(payload: dict[str, Any], user_id: str | None) -> bool:
    return user_id is None or payload.get("user_id") == user_id


class SQLiteTraceLog:
    """Traces in the embedded catalog file."""

    def __init__(self, catalog: SQLiteCatalog, retention: int = TRACE_RETENTION) -> None:
        self.catalog = catalog
        self.retention = retention
        catalog.connection().executescript(_SQLITE_SCHEMA)

    def save(self, trace_id: str, created_at: float, payload: Mapping[str, Any]) -> None:
        """Store one trace and drop the oldest beyond the retention bound."""
        with self.catalog.transaction() as db:
            db.execute("INSERT OR REPLACE INTO traces VALUES (?, ?, ?)",
                       (trace_id, created_at, json.dumps(payload)))
            db.execute("DELETE FROM traces WHERE id NOT IN"
                       " (SELECT id FROM traces ORDER BY created_at DESC, id LIMIT ?)",
                       (self.retention,))

    def get(self, trace_id: str, user_id: str | None = None) -> dict[str, Any] | None:
        """A trace by id, or the newest for ``last``; with ``user_id``, only that caller's."""
        db = self.catalog.connection()
        rows = (db.execute("SELECT payload FROM traces ORDER BY created_at DESC, id")
                if trace_id == "last" else
                db.execute("SELECT payload FROM traces WHERE id = ?", (trace_id,)))
        for (raw,) in rows:
            payload: dict[str, Any] = json.loads(raw)
            if _owned_by(payload, user_id):
                return payload
        return None

    def count(self) -> int:
        """Stored traces."""
        return int(self.catalog.connection().execute("SELECT count(*) FROM traces")
                   .fetchone()[0])


class SQLiteAuditStore:
    """Audit records in the embedded catalog file."""

    def __init__(self, catalog: SQLiteCatalog, retention: int = AUDIT_RETENTION) -> None:
        self.catalog = catalog
        self.retention = retention
        catalog.connection().executescript(_SQLITE_SCHEMA)

    def append(self, at: float, user_id: str, operation: str, outcome: str,
               payload: Mapping[str, Any]) -> None:
        """Append one record and drop the oldest beyond the retention bound."""
        with self.catalog.transaction() as db:
            db.execute("INSERT INTO audit_log(at, user_id, operation, outcome, payload)"
                       " VALUES (?, ?, ?, ?, ?)",
                       (at, user_id, operation, outcome, json.dumps(payload)))
            db.execute("DELETE FROM audit_log WHERE id <= (SELECT max(id) FROM audit_log) - ?",
                       (self.retention,))

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        """The newest records first."""
        rows = self.catalog.connection().execute(
            "SELECT payload FROM audit_log ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [json.loads(r[0]) for r in rows]


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
