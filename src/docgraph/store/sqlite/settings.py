"""The shared admin-settings table in the embedded catalog file (the logic is
:mod:`docgraph.store.sql.settings`)."""

from __future__ import annotations

from docgraph.store.sqlite.catalog import SQLiteCatalog


def create_settings_table(catalog: SQLiteCatalog) -> None:
    """Create ``admin_settings`` if missing."""
    catalog.ensure_tables("CREATE TABLE IF NOT EXISTS admin_settings ("
                          " section TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
                          " revision INTEGER NOT NULL, changed_at REAL NOT NULL,"
                          " PRIMARY KEY (section, key))")
