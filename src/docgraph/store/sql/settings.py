"""Admin settings changed through the admin tab, shared by every process of one index:
written once for both relational backends.

Table ``admin_settings(section, key, value, revision, changed_at)`` (SQLite:
:func:`docgraph.store.sqlite.settings.create_settings_table`; PostgreSQL: a migration).
``revision`` grows with every change, so a process learns whether anything changed with one
index lookup (:meth:`SqlSettingsStore.revision`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from docgraph.store.sql.dialect import SqlDatabase, run


class SqlSettingsStore:
    """The :class:`~docgraph.store.base.SettingsStore` port on a relational catalog."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database

    def revision(self) -> int:
        """A number that grows with every stored change (0: none yet)."""
        return int(run(self.database, "SELECT coalesce(max(revision), 0) FROM admin_settings")
                   .fetchone()[0])

    def overrides(self) -> dict[str, dict[str, Any]]:
        """Every stored setting: section -> key -> value."""
        out: dict[str, dict[str, Any]] = {}
        for section, key, value in run(self.database, "SELECT section, key, value FROM"
                                       " admin_settings ORDER BY section, key").fetchall():
            out.setdefault(str(section), {})[str(key)] = json.loads(value)
        return out

    def record(self, changed: Mapping[str, Mapping[str, Any]], at: float) -> None:
        """Store changed values (JSON-serializable), all under one new revision."""
        rows = [(section, key, json.dumps(value)) for section, values in changed.items()
                for key, value in values.items()]
        if not rows:
            return
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            revision = int(db.execute(sql(
                "SELECT coalesce(max(revision), 0) + 1 FROM admin_settings")).fetchone()[0])
            for section, key, value in rows:
                db.execute(sql(
                    "INSERT INTO admin_settings(section, key, value, revision, changed_at)"
                    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (section, key) DO UPDATE SET"
                    " value = excluded.value, revision = excluded.revision,"
                    " changed_at = excluded.changed_at"), (section, key, value, revision, at))
