"""Retrieval traces and the audit log in the embedded catalog file.

Both are ports (:class:`~docgraph.store.base.TraceLog`, :class:`~docgraph.store.base.AuditStore`)
with one implementation per backend here. Rows are JSON payloads the callers shape (the
governed service hashes the query before anything reaches a log); each log keeps its newest
``retention`` rows. On PostgreSQL they live in the shared database, so every process serving
it writes and reads the same traces and audit records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from docgraph.store.logs import AUDIT_RETENTION, TRACE_RETENTION, owned_by
from docgraph.store.sqlite.catalog import SQLiteCatalog

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
            if owned_by(payload, user_id):
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


