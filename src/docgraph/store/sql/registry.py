"""The source registry's records, written once for every relational backend.

Tables (SQLite: :func:`docgraph.store.sqlite.lifecycle.create_registry_tables`; PostgreSQL:
migration `_LIFECYCLE`): ``sql_sources(name, url, created_at)`` and ``column_tags(id, source,
schema_name, table_name, column_name, pk_column, tag, domain, created_at)``, unique on
(source, schema_name, table_name, column_name, tag, domain). Listings are sorted here, not
by the database, so both backends order names alike whatever their collation.
"""

from __future__ import annotations

from collections.abc import Sequence

from docgraph.store.lifecycle import StoredColumnTag, StoredSqlSource
from docgraph.store.sql.dialect import SqlDatabase, run

_TAG_COLUMNS = "source, schema_name, table_name, column_name, tag, domain, pk_column"


def _tag(row: Sequence[object]) -> StoredColumnTag:
    return StoredColumnTag(str(row[0]), str(row[1]), str(row[2]), str(row[3]), str(row[4]),
                           str(row[5]), None if row[6] is None else str(row[6]))


class SqlSourceRegistryStore:
    """The :class:`~docgraph.store.lifecycle.SourceRegistryStore` port on a relational
    catalog."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database

    def save_sql_source(self, source: StoredSqlSource) -> None:
        """Insert a SQL source, or re-point an existing one (its ``created_at`` is kept)."""
        with self.database.transaction() as db:
            db.execute(self.database.dialect.sql(
                "INSERT INTO sql_sources(name, url, created_at) VALUES (?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET url = excluded.url"),
                (source.name, source.url, source.created_at))

    def sql_source(self, name: str) -> StoredSqlSource | None:
        """The SQL source called ``name``, or None."""
        row = run(self.database, "SELECT name, url, created_at FROM sql_sources WHERE name = ?",
                  (name,)).fetchone()
        return None if row is None else StoredSqlSource(str(row[0]), str(row[1]), float(row[2]))

    def sql_sources(self) -> list[StoredSqlSource]:
        """Every SQL source, by name."""
        rows = run(self.database, "SELECT name, url, created_at FROM sql_sources").fetchall()
        return sorted((StoredSqlSource(str(n), str(u), float(c)) for n, u, c in rows),
                      key=lambda s: s.name)

    def remove_sql_source(self, name: str) -> None:
        """Delete a SQL source and its tags (one transaction)."""
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            db.execute(sql("DELETE FROM column_tags WHERE source = ?"), (name,))
            db.execute(sql("DELETE FROM sql_sources WHERE name = ?"), (name,))

    def save_tag(self, tag: StoredColumnTag, created_at: float) -> None:
        """Insert a tag, or update the primary key column of the same tag."""
        with self.database.transaction() as db:
            db.execute(self.database.dialect.sql(
                "INSERT INTO column_tags(source, schema_name, table_name, column_name, pk_column,"
                " tag, domain, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (source, schema_name, table_name, column_name, tag, domain)"
                " DO UPDATE SET pk_column = excluded.pk_column"),
                (tag.source, tag.schema, tag.table, tag.column, tag.pk_column, tag.tag,
                 tag.domain, created_at))

    def remove_tags(self, tags: Sequence[StoredColumnTag]) -> None:
        """Delete these tags (one transaction)."""
        with self.database.transaction() as db:
            self.database.dialect.executemany(
                db, "DELETE FROM column_tags WHERE source = ? AND schema_name = ? AND"
                " table_name = ? AND column_name = ? AND tag = ? AND domain = ?",
                [(t.source, t.schema, t.table, t.column, t.tag, t.domain) for t in tags])

    def tags(self) -> list[StoredColumnTag]:
        """Every tag, by source, schema, table, column, tag and domain."""
        rows = run(self.database, f"SELECT {_TAG_COLUMNS} FROM column_tags").fetchall()
        return sorted((_tag(r) for r in rows),
                      key=lambda t: (t.source, t.schema, t.table, t.column, t.tag, t.domain))

    def last_indexed(self) -> dict[int, float | None]:
        """When each catalog source (by id) last finished a build (None: never)."""
        rows = run(self.database, "SELECT id, last_indexed_at FROM sources").fetchall()
        return {int(i): None if t is None else float(t) for i, t in rows}
