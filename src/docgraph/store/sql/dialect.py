"""The small hooks that make one SQL text run on SQLite (``sqlite3``) and PostgreSQL
(``psycopg`` 3): placeholders, JSON values and the connection/transaction protocol."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from functools import lru_cache
from typing import Any, Protocol

from docgraph.model import Access


class Cursor(Protocol):
    """The part of a DB-API cursor shared code uses."""

    def fetchone(self) -> Any:
        """The next row, or None."""

    def fetchall(self) -> list[Any]:
        """The remaining rows."""

    def __iter__(self) -> Any:
        """Iterate over the remaining rows."""


class Connection(Protocol):
    """The part of a connection shared code uses (``sqlite3`` and ``psycopg`` both have it)."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any:
        """Run one statement."""


class Dialect:
    """How one backend spells the few things portable SQL cannot: placeholders and JSON.

    Shared statements are written with ``?`` placeholders and no literal ``%``;
    :meth:`sql` rewrites them for the driver (cached per statement text).
    """

    name = "sqlite"
    #: Largest number of bound parameters one statement may carry.
    max_params = 30_000
    #: Appended to an ORDER BY on text to sort by code point, as SQLite's default does.
    binary_order = ""

    def sql(self, text: str) -> str:
        """The statement in this driver's placeholder style."""
        return text

    def json_param(self, value: Any) -> Any:
        """A JSON value as a bound parameter."""
        return json.dumps(value)

    def json_value(self, raw: Any) -> Any:
        """A JSON column value as Python data."""
        return json.loads(raw) if isinstance(raw, str | bytes) else raw

    def access_param(self, access: Access) -> Any:
        """A document's permission set as stored: NULL, or a sorted JSON array of its
        principals (``documents.access``, ``community_access_sources.access``)."""
        return None if access is None else self.json_param(sorted(access))

    def access_value(self, raw: Any) -> Access:
        """A stored permission set (:meth:`access_param`) read back."""
        return None if raw is None else self.principals_value(raw)

    def principals_value(self, raw: Any) -> frozenset[str]:
        """The principals of a stored permission set that is not NULL."""
        return frozenset(str(p) for p in self.json_value(raw))

    def executemany(self, db: Any, text: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows."""
        if rows:
            db.executemany(self.sql(text), rows)

    def in_transaction(self, db: Any) -> bool:
        """Whether ``db`` (an autocommit connection) is inside a transaction now."""
        return bool(db.in_transaction)

    def in_ids(self, ids: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
        """A column's match with ``ids`` as (SQL text to append to the column, parameters),
        in as few statements as the driver allows: ``IN (?, ...)`` lists of 500 values."""
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            yield f" IN ({marks(len(part))})", part


@lru_cache(maxsize=512)
def _pyformat(text: str) -> str:
    if "%s" in text:
        raise ValueError(f"shared SQL must use '?' placeholders: {text[:80]!r}")
    return text.replace("%", "%%").replace("?", "%s")


class PostgresDialect(Dialect):
    """psycopg 3: ``%s`` placeholders, ``jsonb`` parameters, ``executemany`` on a cursor."""

    name = "postgres"
    max_params = 60_000
    binary_order = ' COLLATE "C"'

    def sql(self, text: str) -> str:
        """The statement with ``%s`` placeholders (a literal ``%`` doubled)."""
        return _pyformat(text)

    def json_param(self, value: Any) -> Any:
        """A ``jsonb`` parameter."""
        from psycopg.types.json import Jsonb

        return Jsonb(value)

    def executemany(self, db: Any, text: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for many parameter rows (psycopg pipelines them)."""
        if rows:
            with db.cursor() as cursor:
                cursor.executemany(self.sql(text), rows)

    def in_transaction(self, db: Any) -> bool:
        """Whether ``db`` (an autocommit connection) is inside a transaction now."""
        from psycopg.pq import TransactionStatus

        return bool(db.info.transaction_status != TransactionStatus.IDLE)

    def in_ids(self, ids: Sequence[Any]) -> Iterator[tuple[str, list[Any]]]:
        """A column's match with ``ids``: one ``= ANY(?)`` array parameter."""
        if ids:
            yield " = ANY(?)", [list(ids)]


SQLITE = Dialect()
POSTGRES = PostgresDialect()


class SqlDatabase(Protocol):
    """A relational catalog shared SQL can run on: per-thread connections and transactions."""

    dialect: Dialect

    def connection(self) -> Any:
        """This thread's autocommit connection."""

    def transaction(self) -> AbstractContextManager[Any]:
        """A transaction on this thread's connection: commits on success, rolls back on error."""


def run(database: SqlDatabase, text: str, params: Sequence[Any] = ()) -> Any:
    """Execute one shared statement on this thread's connection; returns the cursor."""
    return database.connection().execute(database.dialect.sql(text), params)


def marks(count: int) -> str:
    """``?, ?, ...`` for an ``IN`` list of ``count`` values."""
    return ",".join("?" * count)
