"""The refresh leader on PostgreSQL: a session-level advisory lock on a connection of its own.

:meth:`PostgresLeaderLock.try_acquire` runs ``pg_try_advisory_lock`` on a dedicated
connection (never one of the catalog's per-thread connections, which come and go) and keeps
that connection open while it leads. The server drops the lock with the session: when the
leader releases it, closes, or dies (a killed process's socket closes, its backend ends), so
another process's next ``try_acquire`` takes over. Advisory locks are per database, so two
indexes on one server elect their leaders independently.

The connection's ``application_name`` carries the leader's ``pid@host``: :meth:`holder`
reads it from ``pg_locks`` joined with ``pg_stat_activity`` (both readable by every role).

A leader whose whole machine dies (or whose network goes) closes no socket: the server
would keep its session, and the lock, until TCP gives up - two hours with the kernel's
defaults. The lock's session therefore sets the server's TCP keepalives
(:data:`SERVER_KEEPALIVES`: a probe after 10 s of silence, every 5 s, 3 unanswered end the
session), so the server drops such a leader within about 25 s and a follower takes over at
its next try. (They apply to TCP connections; a Unix socket has no peer machine to lose.)
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from docgraph.errors import StoreError, StoreUnavailable
from docgraph.store.lifecycle import process_identity
from docgraph.store.postgres.catalog import connection_url, redacted
from docgraph.store.postgres.schema import LEADER_LOCK_KEYS

_APPLICATION = "docgraph refresher "
#: Server-side TCP keepalive settings of the lock's session (seconds, seconds, probes).
SERVER_KEEPALIVES = {"tcp_keepalives_idle": 10, "tcp_keepalives_interval": 5,
                     "tcp_keepalives_count": 3}
_NAME_LIMIT = 63  # NAMEDATALEN - 1: the server truncates application_name there


class PostgresLeaderLock:
    """The :class:`~docgraph.store.lifecycle.LeaderLock` port on one PostgreSQL database."""

    def __init__(self, url: str, identity: str | None = None) -> None:
        self.url = connection_url(url)
        self.display_url = redacted(self.url)
        self.identity = (identity or process_identity())[: _NAME_LIMIT - len(_APPLICATION)]
        self._conn: Any = None
        self._held = False
        self._lock = threading.Lock()

    def _connection(self) -> Any:
        import psycopg

        if self._conn is not None and not self._conn.closed:
            return self._conn
        try:
            conn = psycopg.connect(self.url, autocommit=True,
                                   application_name=_APPLICATION + self.identity)
        except psycopg.OperationalError as exc:  # down, restarting, unreachable
            raise StoreUnavailable(f"cannot connect to PostgreSQL at {self.display_url} for "
                                   f"the refresh leader lock: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.display_url} for the "
                             f"refresh leader lock: {exc}") from exc
        try:
            for name, value in SERVER_KEEPALIVES.items():
                conn.execute("SELECT set_config(%s, %s, false)", (name, str(value)))
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"{self.display_url}: cannot set the keepalives of the refresh "
                             f"leader lock's session: {exc}") from exc
        self._conn = conn
        return conn

    def _drop_connection(self) -> None:
        conn, self._conn, self._held = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close
                conn.close()

    def _execute(self, sql: str, params: tuple[int, ...] = ()) -> Any:
        """Run ``sql`` on the lock's connection. A kept connection that fails is dropped
        (its session, and a lock it held, are gone: a restart, a network cut, a failover)
        and the statement runs once more on a new connection (to the new primary after a
        failover, when the URL lists every host with ``target_session_attrs=read-write``);
        a new connection that fails raises."""
        import psycopg

        kept = self._conn is not None and not self._conn.closed
        try:
            return self._connection().execute(sql, params).fetchone()
        except (psycopg.Error, StoreError):
            self._drop_connection()
            if not kept:
                raise
        return self._connection().execute(sql, params).fetchone()

    def try_acquire(self) -> bool:
        """Lead if no process does; True when this process leads. A leading connection
        that broke lost the lock with it: the lock is tried again at once on a new
        connection (:meth:`_execute`); an unreachable server is False."""
        import psycopg

        with self._lock:
            try:
                if self._held:
                    self._connection().execute("SELECT 1")
                    return True
            except (psycopg.Error, StoreError):
                self._drop_connection()  # the session, and the lock, are gone
            try:
                row = self._execute("SELECT pg_try_advisory_lock(%s, %s)", LEADER_LOCK_KEYS)
            except (psycopg.Error, StoreError):
                self._drop_connection()
                return False
            self._held = bool(row[0])
            return self._held

    @property
    def held(self) -> bool:
        """Whether this process leads through this lock."""
        return self._held

    def holder(self) -> str | None:
        """Who leads (``pid@host``), or None when no process does."""
        import psycopg

        if self._held:
            return self.identity
        with self._lock:
            try:
                row = self._execute(
                    "SELECT a.application_name FROM pg_locks l"
                    " LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
                    " WHERE l.locktype = 'advisory' AND l.granted"
                    " AND l.database = (SELECT oid FROM pg_database"
                    " WHERE datname = current_database())"
                    " AND l.classid::bigint = %s AND l.objid::bigint = %s AND l.objsubid = 2",
                    LEADER_LOCK_KEYS)
            except psycopg.Error as exc:
                self._drop_connection()
                raise StoreError(f"{self.display_url}: cannot read the refresh leader: "
                                 f"{exc}") from exc
        if row is None:
            return None
        name = str(row[0] or "")
        return name[len(_APPLICATION):] if name.startswith(_APPLICATION) else "unknown process"

    def release(self) -> None:
        """Stop leading (a no-op when not leading)."""
        import psycopg

        with self._lock:
            if not self._held:
                return
            try:
                self._connection().execute("SELECT pg_advisory_unlock(%s, %s)",
                                           LEADER_LOCK_KEYS)
                self._held = False
            except psycopg.Error:
                self._drop_connection()  # the session, and so the lock, is gone

    def close(self) -> None:
        """Release the lock and close its connection."""
        with self._lock:
            self._drop_connection()
