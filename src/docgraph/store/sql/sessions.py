"""The console-session port written once for every relational backend.

Table (SQLite: :func:`docgraph.store.sqlite.sessions.create_session_table`; PostgreSQL: the
console-session migration of :mod:`docgraph.store.postgres.schema`):
``console_sessions(digest, user_id, role, token_digest, csrf, created_at, last_seen,
flash)``, ``flash`` a JSON list of ``[kind, message]`` pairs.
"""

from __future__ import annotations

import json

from docgraph.errors import StoreError
from docgraph.store.sessions import StoredSession
from docgraph.store.sql.dialect import SqlDatabase, run

_HEX = frozenset("0123456789abcdef")


def _check_digest(digest: str) -> None:
    if len(digest) != 64 or set(digest) - _HEX:
        raise StoreError(f"session digest {digest[:16]!r}: expected 64 lowercase hex digits")


def _flash(raw: object) -> tuple[tuple[str, str], ...]:
    """The stored messages (an unreadable value reads as none: they are only hints)."""
    try:
        items = json.loads(str(raw))
        return tuple((str(kind), str(text)) for kind, text in items)
    except (ValueError, TypeError):
        return ()


class SqlConsoleSessionStore:
    """The :class:`~docgraph.store.sessions.ConsoleSessionStore` port on a relational
    catalog."""

    def __init__(self, database: SqlDatabase) -> None:
        self.database = database

    def add(self, session: StoredSession) -> None:
        """Store a new session."""
        _check_digest(session.digest)
        with self.database.transaction() as db:
            db.execute(self.database.dialect.sql(
                "INSERT INTO console_sessions(digest, user_id, role, token_digest, csrf,"
                " created_at, last_seen, flash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                (session.digest, session.user, session.role, session.token_digest,
                 session.csrf, session.created_at, session.last_seen,
                 json.dumps([list(m) for m in session.flash])))

    def get(self, digest: str) -> StoredSession | None:
        """The session of ``digest``, or None."""
        row = run(self.database,
                  "SELECT digest, user_id, role, token_digest, csrf, created_at, last_seen,"
                  " flash FROM console_sessions WHERE digest = ?", (digest,)).fetchone()
        if row is None:
            return None
        return StoredSession(str(row[0]), str(row[1]), None if row[2] is None else str(row[2]),
                             str(row[3]), str(row[4]), float(row[5]), float(row[6]),
                             _flash(row[7]))

    def touch(self, digest: str, at: float) -> None:
        """Record a use at ``at`` (never moves ``last_seen`` back)."""
        with self.database.transaction() as db:
            db.execute(self.database.dialect.sql(
                "UPDATE console_sessions SET last_seen = ? WHERE digest = ? AND last_seen < ?"),
                (at, digest, at))

    def set_flash(self, digest: str, flash: tuple[tuple[str, str], ...]) -> None:
        """Replace the session's messages to show once."""
        with self.database.transaction() as db:
            db.execute(self.database.dialect.sql(
                "UPDATE console_sessions SET flash = ? WHERE digest = ?"),
                (json.dumps([list(m) for m in flash]), digest))

    def remove(self, digest: str) -> bool:
        """End a session; whether it was stored."""
        with self.database.transaction() as db:
            gone = db.execute(self.database.dialect.sql(
                "DELETE FROM console_sessions WHERE digest = ? RETURNING digest"),
                (digest,)).fetchall()
        return bool(gone)

    def purge(self, idle_before: float, created_before: float) -> int:
        """Delete the sessions idle since before ``idle_before`` or begun before
        ``created_before``."""
        with self.database.transaction() as db:
            gone = db.execute(self.database.dialect.sql(
                "DELETE FROM console_sessions WHERE last_seen < ? OR created_at < ?"
                " RETURNING digest"), (idle_before, created_before)).fetchall()
        return len(gone)
