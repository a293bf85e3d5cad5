"""The bearer-token port written once for every relational backend.

Tables (SQLite: :func:`docgraph.store.sqlite.tokens.create_token_tables`; PostgreSQL: the
bearer-token migration of :mod:`docgraph.store.postgres.schema`):
``bearer_tokens(digest, user_id, role, created_at, revoked_at)`` and the one-row change
counter ``bearer_token_version(id = 1, n)``.
"""

from __future__ import annotations

from docgraph.errors import StoreError
from docgraph.store.sql.dialect import SqlDatabase, run
from docgraph.store.tokens import MIN_TOKEN_ID_CHARS, TokenEntry

_HEX = frozenset("0123456789abcdef")


def _check_hex(value: str, what: str, length: int | None = None) -> None:
    if (length is not None and len(value) != length) or not value or set(value) - _HEX:
        raise StoreError(f"{what} {value[:16]!r}: expected lowercase hex digits"
                         + (f" ({length} of them)" if length else ""))


class SqlTokenStore:
    """The :class:`~docgraph.store.tokens.TokenStore` port on a relational catalog."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database

    def entries(self, include_revoked: bool = False) -> list[TokenEntry]:
        """Every live token (and, if asked, the revoked ones), oldest first."""
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        rows = run(self.database,
                   "SELECT digest, user_id, role, created_at, revoked_at FROM bearer_tokens"
                   f"{where} ORDER BY created_at, digest").fetchall()
        return [TokenEntry(str(r[0]), str(r[1]), None if r[2] is None else str(r[2]),
                           float(r[3]), None if r[4] is None else float(r[4])) for r in rows]

    def add(self, entry: TokenEntry) -> bool:
        """Store ``entry`` unless its digest is stored already (live or revoked)."""
        _check_hex(entry.digest, "token digest", 64)
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            added = db.execute(sql(
                "INSERT INTO bearer_tokens(digest, user_id, role, created_at, revoked_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING RETURNING digest"),
                (entry.digest, entry.user, entry.role, entry.created_at,
                 entry.revoked_at)).fetchall()
            if added:
                db.execute(sql("UPDATE bearer_token_version SET n = n + 1 WHERE id = 1"))
        return bool(added)

    def remove(self, token_id: str, at: float) -> int:
        """Revoke the live tokens whose digest starts with ``token_id``."""
        _check_hex(token_id, "token id")
        if len(token_id) < MIN_TOKEN_ID_CHARS:
            raise StoreError(f"token id {token_id!r}: give at least {MIN_TOKEN_ID_CHARS} "
                             "hex digits")
        sql = self.database.dialect.sql
        with self.database.transaction() as db:
            revoked = db.execute(sql(
                "UPDATE bearer_tokens SET revoked_at = ? WHERE revoked_at IS NULL"
                " AND substr(digest, 1, ?) = ? RETURNING digest"),
                (at, len(token_id), token_id)).fetchall()
            if revoked:
                db.execute(sql("UPDATE bearer_token_version SET n = n + 1 WHERE id = 1"))
        return len(revoked)

    def version(self) -> int:
        """The change counter (one primary-key read)."""
        row = run(self.database,
                  "SELECT n FROM bearer_token_version WHERE id = 1").fetchone()
        return 0 if row is None else int(row[0])
