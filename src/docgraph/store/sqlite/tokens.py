"""The bearer-token tables in the embedded catalog file (the logic is
:mod:`docgraph.store.sql.tokens`)."""

from __future__ import annotations

from docgraph.store.sqlite.catalog import SQLiteCatalog

_TOKEN_TABLES = """
CREATE TABLE IF NOT EXISTS bearer_tokens (
    digest TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    role TEXT,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE TABLE IF NOT EXISTS bearer_token_version (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n INTEGER NOT NULL
);
INSERT INTO bearer_token_version(id, n) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
"""


def create_token_tables(catalog: SQLiteCatalog) -> None:
    """Create the bearer-token tables and their change counter if missing (idempotent)."""
    catalog.ensure_tables(_TOKEN_TABLES)
