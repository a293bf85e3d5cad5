"""Row-level re-check of chunks derived from table rows, under the caller's rights.

Chunks of free-standing documents carry no origin and pass untouched (the namespace
pre-filter already authorized them). Row chunks are grouped per table and re-authorized in
one batch per table; whatever the authorizer does not return is dropped, and an authorizer
error drops that table's chunks (fail closed).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from docgraph.errors import ConfigError
from docgraph.governance.caller import Caller
from docgraph.model import RowOrigin

log = logging.getLogger(__name__)
TableKey = tuple[str, str, str, str]  # source, schema, table, pk column
#: Primary keys per ``IN (...)`` statement of :class:`SqlRowAuthorizer`.
PK_BATCH = 5000
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


class RowAuthorizer(Protocol):
    """Decides which rows of one table a caller may see."""

    def visible(
        self, caller: Caller, source: str, schema: str, table: str, pk_column: str,
        pk_values: Sequence[str],
    ) -> set[str]:
        """The subset of ``pk_values`` visible to ``caller``; raise on any failure."""
        ...


class CallableRowAuthorizer:
    """Adapts a plain function (e.g. a call to a governed SQL gateway) to the protocol."""

    def __init__(self, fn: Callable[[Caller, TableKey, Sequence[str]], set[str]]) -> None:
        self.fn = fn

    def visible(
        self, caller: Caller, source: str, schema: str, table: str, pk_column: str,
        pk_values: Sequence[str],
    ) -> set[str]:
        """Delegates to the function with ``(caller, (source, schema, table, pk), values)``."""
        return set(self.fn(caller, (source, schema, table, pk_column), pk_values))


class SqlRowAuthorizer:
    """Re-checks rows in the source database as the caller.

    Runs ``SELECT pk FROM schema.table WHERE pk IN (...)`` with bound parameters inside a
    transaction that first assumes the caller's identity, so the database's own row-level
    security applies:

    - ``identity="set_role"`` (PostgreSQL): ``SET LOCAL ROLE <role>``, the role being
      ``role_for(caller)`` (default: the user id), validated as a plain identifier;
    - ``identity="session_setting"`` (PostgreSQL): ``set_config(<setting>, user id, true)``
      for policies written against ``current_setting('<setting>')``;
    - ``identity="none"``: no identity switch (e.g. SQLite, or a per-caller URL); rows
      deleted since indexing still drop out.
    """

    def __init__(
        self,
        urls: Mapping[str, str],
        identity: Literal["set_role", "session_setting", "none"] = "set_role",
        setting: str = "docgraph.user_id",
        role_for: Callable[[Caller], str] | None = None,
    ) -> None:
        self.urls = dict(urls)
        self.identity = identity
        self.setting = setting
        self.role_for = role_for or (lambda caller: caller.user_id)
        self._engines: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _engine(self, source: str) -> Any:
        import sqlalchemy as sa

        with self._lock:
            if source not in self._engines:
                if source not in self.urls:
                    raise ConfigError(f"no database URL configured for table source {source!r}")
                self._engines[source] = sa.create_engine(self.urls[source], pool_pre_ping=True)
            return self._engines[source]

    def visible(
        self, caller: Caller, source: str, schema: str, table: str, pk_column: str,
        pk_values: Sequence[str],
    ) -> set[str]:
        """Rows of ``schema.table`` the caller can read, among ``pk_values``."""
        import sqlalchemy as sa

        if not pk_values:
            return set()
        engine = self._engine(source)
        target = sa.table(table, sa.column(pk_column), schema=schema or None)
        query = sa.select(target.c[pk_column]).where(
            sa.cast(target.c[pk_column], sa.String).in_(sa.bindparam("pks", expanding=True))
        )
        values = [str(v) for v in pk_values]
        found: set[str] = set()
        with engine.begin() as conn:
            if self.identity == "set_role":
                role = self.role_for(caller)
                if not _IDENTIFIER.match(role):
                    raise ConfigError(f"role name {role!r} is not a plain SQL identifier")
                quoted = engine.dialect.identifier_preparer.quote(role)
                conn.exec_driver_sql(f"SET LOCAL ROLE {quoted}")
            elif self.identity == "session_setting":
                conn.execute(sa.text("SELECT set_config(:name, :value, true)"),
                             {"name": self.setting, "value": caller.user_id})
            # Batches stay far below the drivers' bound-parameter limits (65,535 in
            # PostgreSQL), whatever a community report or a page asks about.
            for start in range(0, len(values), PK_BATCH):
                rows = conn.execute(query, {"pks": values[start:start + PK_BATCH]}).fetchall()
                found.update(str(r[0]) for r in rows)
        return found


@dataclass
class RowCheckResult:
    """What a row re-check kept and dropped."""

    allowed_doc_ids: set[str] = field(default_factory=set)
    denied_doc_ids: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    #: Names of the table sources whose re-check failed (their rows were hidden): what an
    #: answer tells its caller is missing from it (never the error itself).
    unavailable: set[str] = field(default_factory=set)


def check_rows(
    caller: Caller,
    authorizer: RowAuthorizer | None,
    origins: Mapping[str, RowOrigin],
) -> RowCheckResult:
    """Authorize row documents (doc id -> origin) in one batch per table.

    With no authorizer configured every row document is denied: a deployment that indexes
    table rows must say how to re-check them.
    """
    result = RowCheckResult()
    groups: dict[TableKey, dict[str, list[str]]] = {}
    for doc_id, origin in origins.items():
        key = (origin.source, origin.schema, origin.table, origin.pk_column)
        groups.setdefault(key, {}).setdefault(origin.pk_value, []).append(doc_id)
    for key, by_pk in sorted(groups.items()):
        if authorizer is None:
            result.denied_doc_ids.update(d for ids in by_pk.values() for d in ids)
            result.failures.append(f"{'.'.join(key[:3])}: no row authorizer configured")
            continue
        try:
            visible = authorizer.visible(caller, *key, sorted(by_pk))
        except Exception as exc:  # fail closed, loudly
            log.error("row authorizer failed for %s (%s): %s", ".".join(key[:3]),
                      caller.user_id, exc)
            result.failures.append(f"{'.'.join(key[:3])}: {type(exc).__name__}: {exc}")
            result.unavailable.add(key[0])
            visible = set()
        for pk, doc_ids in by_pk.items():
            (result.allowed_doc_ids if pk in visible else result.denied_doc_ids).update(doc_ids)
    return result
