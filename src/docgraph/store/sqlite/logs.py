"""The trace and audit tables in the embedded catalog file (the logic is
:mod:`docgraph.store.sql.logs`)."""

from __future__ import annotations

from docgraph.store.sqlite.catalog import SQLiteCatalog

_LOG_TABLES = """
CREATE TABLE IF NOT EXISTS traces (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    user_id TEXT NOT NULL DEFAULT '',
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


def create_log_tables(catalog: SQLiteCatalog) -> None:
    """Create the trace and audit tables if missing; a traces table from before callers
    were recorded per row gets its ``user_id`` column, filled from the payloads."""
    catalog.ensure_tables(_LOG_TABLES)
    if catalog.read_only:
        return  # an older traces table is read as it is
    with catalog.transaction() as db:
        columns = {str(r[1]) for r in db.execute("PRAGMA table_info(traces)")}
        if "user_id" not in columns:
            db.execute("ALTER TABLE traces ADD COLUMN user_id TEXT NOT NULL DEFAULT ''")
            db.execute("UPDATE traces SET user_id = coalesce(json_extract(payload, '$.user_id'),"
                       " '')")
