"""The console-session table in the embedded catalog file (the logic is
:mod:`docgraph.store.sql.sessions`). Created in place the first time the port is used, so
an index file written before it exists gains the table without a schema version step."""

from __future__ import annotations

from docgraph.store.sqlite.catalog import SQLiteCatalog

_SESSION_TABLE = """
CREATE TABLE IF NOT EXISTS console_sessions (
    digest TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    role TEXT,
    token_digest TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_seen REAL NOT NULL,
    flash TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS console_sessions_last_seen ON console_sessions (last_seen);
"""


def create_session_table(catalog: SQLiteCatalog) -> None:
    """Create the console-session table if missing (idempotent)."""
    catalog.ensure_tables(_SESSION_TABLE)
