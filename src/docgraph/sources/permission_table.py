"""Who may read documents, from a table of permissions exported from another system.

``[sources.permissions_table]`` names a database (a SQLAlchemy URL), a table and its two
columns: the document, as docgraph stores its id (the folder's URN and the file's path, e.g.
``file:///srv/share/plan.md`` or ``s3://bucket/docs/plan.md``), and a principal
(``user:<id>`` or ``group:<name>``); one row per reader. A document the table names gets
exactly those readers; one it does not name keeps the other rules. A folder's build reads
the rows of its documents once (one range query on the document column, every value bound),
so an exported change takes effect at the next build without re-embedding. A row whose
principal is not one makes its document unreadable (fails closed); a table that cannot be
read fails every document of the folder closed.
"""

from __future__ import annotations

from typing import Any

from docgraph.config import PermissionsTable
from docgraph.model import parse_principals


class PermissionTableUnreadable(Exception):
    """The permissions table could not be read; the message names it and says why."""


class TableReaders:
    """One folder's rows of the permissions table: document id -> its readers, or why
    they cannot be read."""

    def __init__(self, readers: dict[str, frozenset[str]], errors: dict[str, str]) -> None:
        self.readers = readers
        self.errors = errors

    @classmethod
    def read(cls, settings: PermissionsTable, urn: str) -> TableReaders:
        """The rows of the documents under ``urn`` (raises
        :class:`PermissionTableUnreadable`)."""
        import sqlalchemy as sa

        schema, _, name = settings.table.rpartition(".")
        table = sa.Table(name, sa.MetaData(), sa.Column(settings.document_column),
                         sa.Column(settings.principal_column), schema=schema or None)
        document = table.c[settings.document_column]
        principal = table.c[settings.principal_column]
        prefix = urn.rstrip("/") + "/"
        query = sa.select(document, principal).where(
            document >= sa.bindparam("low"), document < sa.bindparam("high"))
        engine = sa.create_engine(settings.url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                rows: list[Any] = list(conn.execute(
                    query, {"low": prefix, "high": prefix[:-1] + "0"}).fetchall())
        except Exception as exc:  # the driver's error, whatever it is
            where = f"{settings.table} of {sa.engine.make_url(settings.url).render_as_string()}"
            raise PermissionTableUnreadable(
                f"permissions table {where}: {' '.join(str(exc).split())[:300]}") from exc
        finally:
            engine.dispose()
        found: dict[str, set[str]] = {}
        errors: dict[str, str] = {}
        for doc_id, value in rows:
            try:
                found.setdefault(str(doc_id), set()).update(parse_principals([value]))
            except ValueError as exc:
                errors[str(doc_id)] = f"permissions table {settings.table}: {exc}"
        return cls({d: frozenset(p) for d, p in found.items()}, errors)
