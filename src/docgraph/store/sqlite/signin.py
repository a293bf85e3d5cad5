"""The sign-in bucket table in the embedded catalog file (the logic is
:mod:`docgraph.store.sql.signin`). Created in place the first time the port is used, like
the console-session table, so an index file written before it exists gains the table
without a schema version step (and an older docgraph still opens the file)."""

from __future__ import annotations

from docgraph.store.sqlite.catalog import SQLiteCatalog

_SIGNIN_TABLE = """
CREATE TABLE IF NOT EXISTS signin_buckets (
    key TEXT PRIMARY KEY,
    burst REAL NOT NULL,
    per_second REAL NOT NULL,
    tokens REAL NOT NULL,
    attempted_at REAL NOT NULL,
    previous_at REAL,
    wait_s REAL NOT NULL,
    previous_wait_s REAL NOT NULL,
    succeeded_at REAL
);
CREATE INDEX IF NOT EXISTS signin_buckets_attempted ON signin_buckets (attempted_at);
"""


def create_signin_table(catalog: SQLiteCatalog) -> None:
    """Create the sign-in bucket table if missing (idempotent; a read-only index stands a
    ``TEMP`` table in for it, see :meth:`SQLiteCatalog.ensure_tables`)."""
    catalog.ensure_tables(_SIGNIN_TABLE)
