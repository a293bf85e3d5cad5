"""The source registry and build history tables in the embedded catalog file (the logic is
:mod:`docgraph.store.sql.registry` and :mod:`docgraph.store.sql.builds`). The layouts are
those of every earlier docgraph, so existing index files keep their records."""

from __future__ import annotations

from docgraph.store.sqlite.catalog import SQLiteCatalog

_REGISTRY_TABLES = """
CREATE TABLE IF NOT EXISTS sql_sources (
    name TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS column_tags (
    id INTEGER PRIMARY KEY,
    source TEXT NOT NULL REFERENCES sql_sources(name) ON DELETE CASCADE,
    schema_name TEXT NOT NULL,
    table_name TEXT NOT NULL,
    column_name TEXT NOT NULL,
    pk_column TEXT,
    tag TEXT NOT NULL,
    domain TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL,
    UNIQUE (source, schema_name, table_name, column_name, tag, domain)
);
"""

_BUILD_TABLES = """
CREATE TABLE IF NOT EXISTS build_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    namespace TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL NOT NULL,
    outcome TEXT NOT NULL,
    documents_changed INTEGER NOT NULL DEFAULT 0,
    chunks_embedded INTEGER NOT NULL DEFAULT 0,
    bodies_read INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS build_runs_namespace ON build_runs(namespace, finished_at);
CREATE TABLE IF NOT EXISTS build_phases (
    build_id INTEGER NOT NULL REFERENCES build_runs(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    source TEXT NOT NULL,
    phase TEXT NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT NOT NULL,
    items INTEGER NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (build_id, ordinal)
);
"""


def create_registry_tables(catalog: SQLiteCatalog) -> None:
    """Create the ``sql_sources`` and ``column_tags`` tables if missing."""
    catalog.ensure_tables(_REGISTRY_TABLES)


def create_build_tables(catalog: SQLiteCatalog) -> None:
    """Create the ``build_runs`` and ``build_phases`` tables if missing."""
    catalog.ensure_tables(_BUILD_TABLES)
