"""Table-derived sources: read tagged columns of SQL databases through SQLAlchemy (>= 2).

Identifiers (schema, table, column, primary key) are first resolved against the database's
own catalog (SQLAlchemy's inspector), then always quoted by SQLAlchemy's compiler; values
(primary keys) only ever travel as bound parameters. Nothing here formats user input into
SQL text.

* ``natural_language`` column -> :meth:`TableReader.scan_rows` yields one
  :class:`RowDocument` per row (``schema.table.column/<pk>``, origin fields filled);
  :meth:`TableReader.fetch_rows` re-reads given rows by primary key (``pk IN :pks``).
* ``entity:<type>`` column -> :meth:`TableReader.distinct_values`, the
  ``SELECT DISTINCT column FROM schema.table`` vocabulary query, run live at each build.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from docgraph.errors import SourceError
from docgraph.model import RowOrigin
from docgraph.sources.rows import RowDocument, row_doc_id


@dataclass(frozen=True, slots=True)
class ColumnRef:
    """A column as the database spells it, with its table's single-column primary key."""

    source: str
    schema: str
    table: str
    column: str
    pk_column: str | None
    pk_kind: str = "text"  # "integer", "text" or "other": how primary-key values are bound


def _describe(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _pk_kind(sql_type: Any) -> str:
    try:
        python_type = sql_type.python_type
    except Exception:  # types without a Python equivalent
        return "other"
    if python_type is int:
        return "integer"
    return "text" if python_type is str else "other"


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _pick(wanted: str, available: Sequence[str], what: str, where: str) -> str:
    """The database's spelling of ``wanted``: exact match, else a unique case-insensitive one."""
    if wanted in available:
        return wanted
    folded = [name for name in available if name.casefold() == wanted.casefold()]
    if len(folded) == 1:
        return folded[0]
    if folded:
        raise SourceError(f"{what} {wanted!r} is ambiguous in {where}: {sorted(folded)}")
    raise SourceError(f"no {what} {wanted!r} in {where}")


@dataclass(frozen=True, slots=True)
class TableShape:
    """A table or view as :meth:`TableReader.describe` lists it: its columns as
    ``(name, type)`` and its single-column primary key (None: none or composite)."""

    table: str
    columns: tuple[tuple[str, str], ...]
    pk_column: str | None


class TableReader:
    """Reads one SQL source (a SQLAlchemy URL with its credentials) for docgraph.

    A reader opens connections on demand (no pool is kept) and is closed with :meth:`close`.
    """

    def __init__(self, name: str, url: str, timeout_s: float = 30.0) -> None:
        import sqlalchemy as sa
        from sqlalchemy.pool import NullPool

        self.name = name
        connect_args: dict[str, Any] = {}
        try:
            parsed = sa.engine.make_url(url)
            if parsed.get_backend_name() == "postgresql":
                connect_args["connect_timeout"] = max(1, int(timeout_s))
            elif parsed.get_backend_name() == "sqlite":
                connect_args["timeout"] = timeout_s
            self.engine = sa.create_engine(parsed, poolclass=NullPool, connect_args=connect_args)
        except Exception as exc:
            raise SourceError(f"cannot open SQL source {name!r}: {_describe(exc)}") from exc
        self.dialect = self.engine.dialect.name

    def close(self) -> None:
        """Release the engine."""
        self.engine.dispose()

    def __enter__(self) -> TableReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- identifiers ---------------------------------------------------------

    def resolve(self, schema: str | None, table: str, column: str) -> ColumnRef:
        """Look the column up in the database; returns its exact spelling and primary key.

        ``schema`` None means the connection's default schema (``main`` in SQLite, usually
        ``public`` in PostgreSQL). Raises :class:`SourceError` naming what is missing."""
        import sqlalchemy as sa

        try:
            with self.engine.connect() as conn:
                inspector = sa.inspect(conn)
                schemas = inspector.get_schema_names()
                if schema is None:
                    schema = inspector.default_schema_name or (schemas[0] if schemas else "")
                schema = _pick(schema, schemas, "schema", f"SQL source {self.name!r}")
                where = f"{self.name}:{schema}"
                relations = [*inspector.get_table_names(schema=schema),
                             *inspector.get_view_names(schema=schema)]
                table = _pick(table, relations, "table", where)
                described = inspector.get_columns(table, schema=schema)
                columns = [c["name"] for c in described]
                column = _pick(column, columns, "column", f"{where}.{table}")
                pk = inspector.get_pk_constraint(table, schema=schema) or {}
                types = {c["name"]: c["type"] for c in described}
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"cannot inspect SQL source {self.name!r}: {_describe(exc)}"
            ) from exc
        constrained = list(pk.get("constrained_columns") or [])
        pk_column = constrained[0] if len(constrained) == 1 else None
        return ColumnRef(self.name, schema, table, column, pk_column,
                         _pk_kind(types.get(pk_column)) if pk_column else "text")

    def describe(self, schema: str | None = None,
                 limit: int = 100) -> tuple[str, list[str], list[TableShape]]:
        """``(schema, schemas, tables)``: the schema described (``schema``, spelled as the
        database does, or the default one), every schema but the database's own catalogs,
        and the schema's tables and views (at most ``limit``, by name), each with its
        columns and single-column primary key: what a person tags. Raises
        :class:`SourceError` for an unknown schema or a database that cannot be
        inspected."""
        import warnings

        import sqlalchemy as sa

        try:
            with self.engine.connect() as conn, warnings.catch_warnings():
                # A column type SQLAlchemy does not know (e.g. pgvector's) is listed as such.
                warnings.simplefilter("ignore", sa.exc.SAWarning)
                inspector = sa.inspect(conn)
                schemas = [n for n in inspector.get_schema_names()
                           if n != "information_schema" and not n.startswith("pg_")]
                if schema is None:
                    schema = inspector.default_schema_name or (schemas[0] if schemas else "")
                else:
                    schema = _pick(schema, schemas, "schema", f"SQL source {self.name!r}")
                names = sorted([*inspector.get_table_names(schema=schema),
                                *inspector.get_view_names(schema=schema)])[:limit]
                shapes = []
                for name in names:
                    columns = inspector.get_columns(name, schema=schema)
                    pk = inspector.get_pk_constraint(name, schema=schema) or {}
                    constrained = list(pk.get("constrained_columns") or [])
                    shapes.append(TableShape(
                        name, tuple((str(c["name"]), str(c["type"])) for c in columns),
                        constrained[0] if len(constrained) == 1 else None))
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"cannot inspect SQL source {self.name!r}: {_describe(exc)}"
            ) from exc
        return schema, schemas, shapes

    def _table(self, ref: ColumnRef) -> Any:
        import sqlalchemy as sa
        from sqlalchemy.sql import quoted_name

        names = [ref.column] if ref.pk_column in (None, ref.column) else [ref.pk_column, ref.column]
        return sa.table(
            quoted_name(ref.table, True),
            *(sa.column(quoted_name(n, True)) for n in names if n is not None),
            schema=quoted_name(ref.schema, True) if ref.schema else None,
        )

    # -- natural_language ----------------------------------------------------

    def _require_pk(self, ref: ColumnRef) -> str:
        if ref.pk_column is None:
            raise SourceError(
                f"{self.name}:{ref.schema}.{ref.table} has no single-column primary key; "
                "a natural_language column needs one (one document per row)"
            )
        return ref.pk_column

    def row_statement(self, ref: ColumnRef) -> Any:
        """``SELECT pk, column FROM schema.table WHERE pk IN (:pks)`` with an expanding bound
        parameter ``pks``."""
        import sqlalchemy as sa

        pk = self._require_pk(ref)
        table = self._table(ref)
        key = table.c[pk] if ref.pk_kind in ("integer", "text") else sa.cast(table.c[pk], sa.String)
        return sa.select(table.c[pk], table.c[ref.column]).where(
            key.in_(sa.bindparam("pks", expanding=True))
        )

    def scan_rows(self, ref: ColumnRef, batch_rows: int = 1000) -> Iterator[RowDocument]:
        """Every row with a non-empty value, as a :class:`RowDocument`, in primary-key order.

        Raises :class:`SourceError` if the query fails at any point (also mid-scan)."""
        import sqlalchemy as sa

        pk = self._require_pk(ref)
        table = self._table(ref)
        query = sa.select(table.c[pk], table.c[ref.column]).order_by(table.c[pk])
        try:
            with self.engine.connect() as conn:
                result = conn.execution_options(stream_results=True,
                                                yield_per=batch_rows).execute(query)
                for pk_value, value in result:
                    document = self._row(ref, pk, pk_value, value)
                    if document is not None:
                        yield document
        except SourceError:
            raise
        except Exception as exc:
            raise SourceError(
                f"cannot read {self.name}:{ref.schema}.{ref.table}.{ref.column}: {_describe(exc)}"
            ) from exc

    def fetch_rows(self, ref: ColumnRef, pk_values: Sequence[str]) -> dict[str, RowDocument]:
        """The current documents of the given rows (absent: deleted or empty), by primary key."""
        if not pk_values:
            return {}
        pk = self._require_pk(ref)
        values: list[object] = [str(v) for v in pk_values]
        if ref.pk_kind == "integer":
            values = [int(str(v)) for v in values if _is_int(str(v))]
            if not values:
                return {}
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(self.row_statement(ref), {"pks": values}).fetchall()
        except Exception as exc:
            raise SourceError(
                f"cannot read {self.name}:{ref.schema}.{ref.table}.{ref.column}: {_describe(exc)}"
            ) from exc
        found = (self._row(ref, pk, r[0], r[1]) for r in rows)
        return {d.origin.pk_value: d for d in found if d is not None}

    def _row(self, ref: ColumnRef, pk: str, pk_value: object, value: object) -> RowDocument | None:
        if value is None:
            return None
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if not text.strip():
            return None
        key = str(pk_value)
        return RowDocument(
            doc_id=row_doc_id(ref.schema, ref.table, ref.column, key),
            text=text,
            origin=RowOrigin(ref.source, ref.schema, ref.table, pk, key),
        )

    # -- entity:<type> -------------------------------------------------------

    def distinct_values(self, ref: ColumnRef, limit: int) -> list[str]:
        """``SELECT DISTINCT column FROM schema.table`` (non-null), at most ``limit`` values.

        Raises :class:`SourceError` when the query fails or the column has more than
        ``limit`` distinct values (a vocabulary that large is almost surely not names)."""
        import sqlalchemy as sa

        table = self._table(ref)
        col = table.c[ref.column]
        query = sa.select(col).where(col.is_not(None)).distinct().limit(limit + 1)
        try:
            with self.engine.connect() as conn:
                values = [r[0] for r in conn.execute(query)]
        except Exception as exc:
            raise SourceError(
                f"cannot read {self.name}:{ref.schema}.{ref.table}.{ref.column}: {_describe(exc)}"
            ) from exc
        if len(values) > limit:
            raise SourceError(
                f"{self.name}:{ref.schema}.{ref.table}.{ref.column} has more than {limit} "
                "distinct values; raise sources.max_vocabulary_terms or tag a narrower column"
            )
        terms = (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values)
        return sorted({t.strip() for t in terms if t.strip()})
