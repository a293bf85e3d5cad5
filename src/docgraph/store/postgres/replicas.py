"""Reads from PostgreSQL streaming replicas (``[store] read_urls``), writes to the primary.

:class:`ReplicaCatalog` is the query side's catalog: the same SQL as
:class:`~docgraph.store.postgres.catalog.PostgresCatalog` (it is one), on connections to hot
standbys. Each thread's connection goes to one replica, picked when it is opened
(``read_policy``: in turn, or the one that has replayed the most WAL); a replica that cannot
be reached is skipped, and with none reachable the read goes to the primary. Nothing is
written through it: a hot standby refuses writes, so a write routed here by mistake fails
loudly instead of reaching a copy.

Read-your-writes: the primary catalog counts the transactions this process committed
(:attr:`PostgresCatalog.writes`; traces, audit and sessions are not counted, no query reads
them). When a read finds the count grown since its connection last caught up, it asks the
primary once for its WAL insert position (``pg_current_wal_insert_lsn()``, shared by every
thread for that count) and waits until its replica has replayed past it
(``pg_last_wal_replay_lsn()``), at most ``read_wait_s``; past that bound it reads the
primary. With no write since, a read costs the replica nothing extra.

Staleness from other processes' writes (a build on another server, a revocation, a
deletion) is bounded by ``read_max_lag_s``: once a second a process notes the primary's WAL
position (one statement on the primary, shared by its threads), and each thread's replica
connection, checked at most once a second, must have replayed the position noted
``read_max_lag_s`` ago (the oldest one noted, in a process younger than that); a replica
that has not is passed over for the primary until it has. Row-level security
and governance hold alike on a replica: roles, policies and docgraph's tables are
replicated with everything else.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

from docgraph.errors import StoreError, StoreUnavailable
from docgraph.store.base import ReplicaStatus
from docgraph.store.postgres.catalog import (
    PostgresCatalog,
    connection_url,
    in_transaction,
    redacted,
)

ReadPolicy = Literal["round_robin", "least_lag"]
_POLL_S = 0.005  # how often a read waiting for its replica asks again
_STATUS_TIMEOUT_S = 2  # connect timeout of a status probe: one dead replica must not hang it
#: After no replica answered, reads go to the primary for this long before replicas are
#: tried again (an unreachable host must not cost every read a connect timeout).
RETRY_REPLICAS_S = 5.0
#: How often a process notes the primary's WAL position, and a thread checks its replica
#: against the position of ``read_max_lag_s`` ago.
FRESHNESS_CHECK_S = 1.0


def lsn_value(lsn: str | None) -> int | None:
    """A ``pg_lsn`` text (``16/B374D848``) as a byte position, for differences."""
    if lsn is None:
        return None
    high, _, low = str(lsn).partition("/")
    return (int(high, 16) << 32) + int(low, 16)


def lsn_text(position: int) -> str:
    """A byte position as ``pg_lsn`` text."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


#: The primary's WAL insert position as the end of the last record inserted, with the page
#: size: an insert position just past a page's header (24 bytes, 40 at a segment's start)
#: means the last record ended at the page boundary, which is what a standby reports having
#: replayed; waiting for the header's end would wait for the next write.
WRITE_TARGET_SQL = ("SELECT pg_current_wal_insert_lsn()::text,"
                    " current_setting('wal_block_size')::int")
_PAGE_HEADERS = (24, 40)


def write_target(insert_lsn: str, block_size: int) -> str:
    """What a standby must have replayed to hold every record inserted before
    ``insert_lsn`` (see :data:`WRITE_TARGET_SQL`)."""
    position = lsn_value(insert_lsn) or 0
    if position % block_size in _PAGE_HEADERS:
        position -= position % block_size
    return lsn_text(position)


class ReplicaCatalog(PostgresCatalog):
    """The catalog read from the replicas at ``urls`` (see the module docstring); writes and
    read-your-writes fall back to ``primary``. Migrations are the primary's: a standby
    replays them."""

    def __init__(self, primary: PostgresCatalog, urls: Sequence[str],
                 policy: ReadPolicy = "round_robin", wait_s: float = 2.0,
                 max_lag_s: float = 10.0) -> None:
        if not urls:
            raise StoreError("a replica catalog needs at least one URL in store.read_urls")
        self.primary = primary
        self.urls = [connection_url(u) for u in urls]
        self.url = self.urls[0]
        self.display_url = ", ".join(redacted(u) for u in self.urls)
        self.policy: ReadPolicy = policy
        self.wait_s = wait_s
        self.max_lag_s = max_lag_s
        # (monotonic time, primary WAL position) noted about once a second, oldest first
        self._noted: list[tuple[float, str]] = []
        self.writes = 0
        self._local = threading.local()
        self._connections: list[Any] = []
        self._connections_lock = threading.Lock()
        self._turn = itertools.count()
        self._target_lock = threading.Lock()
        self._target: tuple[int, str] = (0, "0/0")  # (primary.writes, its insert LSN)
        #: Reads that went to the primary because no replica had caught up within the
        #: bound, or none could be reached (for status and tests).
        self.fallbacks = 0
        self._replicas_down_until = 0.0

    # -- which replica ------------------------------------------------------------------

    def _open(self, url: str) -> Any:
        import psycopg
        from pgvector.psycopg import register_vector

        conn = psycopg.connect(url, autocommit=True, connect_timeout=_STATUS_TIMEOUT_S * 2)
        try:
            register_vector(conn)
        except psycopg.Error:
            conn.close()
            raise
        return conn

    def _connect(self) -> Any:
        """A connection to a replica by :attr:`policy`; StoreUnavailable when none answers."""
        import psycopg

        start = next(self._turn)
        order = [self.urls[(start + i) % len(self.urls)] for i in range(len(self.urls))]
        opened: list[tuple[int, Any]] = []
        errors: list[str] = []
        for url in order:
            try:
                conn = self._open(url)
            except psycopg.Error as exc:
                errors.append(f"{redacted(url)}: {exc}")
                continue
            if self.policy == "round_robin":
                return conn
            (replayed,) = conn.execute("SELECT coalesce(pg_last_wal_replay_lsn(),"
                                       " pg_current_wal_lsn())::text").fetchone()
            opened.append((lsn_value(replayed) or 0, conn))
        if not opened:
            raise StoreUnavailable("no replica in store.read_urls answers: " + "; ".join(errors))
        opened.sort(key=lambda item: -item[0])
        for _, other in opened[1:]:
            other.close()
        return opened[0][1]

    # -- read-your-writes -----------------------------------------------------------------

    def connection(self) -> Any:
        """This thread's replica connection once it has replayed this process's last write;
        else (past ``read_wait_s``, or no replica reachable) the primary's."""
        primary_conn = getattr(self.primary._local, "conn", None)
        if primary_conn is not None and not primary_conn.closed and in_transaction(primary_conn):
            return primary_conn  # a transaction begun on the primary stays there
        conn = getattr(self._local, "conn", None)
        if (conn is None or conn.closed) and time.monotonic() < self._replicas_down_until:
            self.fallbacks += 1
            return self.primary.connection()
        try:
            conn = super().connection()
        except StoreUnavailable:
            self._replicas_down_until = time.monotonic() + RETRY_REPLICAS_S
            self.fallbacks += 1
            return self.primary.connection()
        if in_transaction(conn) or (self._caught_up(conn) and self._fresh_enough(conn)):
            return conn
        self.fallbacks += 1
        return self.primary.connection()

    def _fresh_enough(self, conn: Any) -> bool:
        """Whether ``conn``'s replica has replayed what the primary held ``max_lag_s`` ago
        (checked at most once a second per thread; see the module docstring)."""
        import psycopg

        if self.max_lag_s <= 0:
            return True
        now = time.monotonic()
        checked = getattr(self._local, "fresh", None)
        if checked is not None and checked[0] is conn and now - checked[1] < FRESHNESS_CHECK_S:
            return True
        try:
            target = self._position_as_of(now)
        except (StoreError, psycopg.Error):
            return True  # the primary is gone (a failover): the replica is all there is
        done = _replayed(conn, target)
        if done:
            self._local.fresh = (conn, now)
        return done

    def _position_as_of(self, now: float) -> str:
        """What a replica must have replayed at ``now``: the primary's WAL position noted
        within a second before ``now - max_lag_s``; when none was (the process is younger,
        or no read came for a while) a later one, the newest when there is a gap (stricter,
        never staler). A new position is noted when the last is a second old."""
        with self._target_lock:
            if not self._noted or now - self._noted[-1][0] >= FRESHNESS_CHECK_S:
                lsn, block_size = self.primary.connection().execute(
                    WRITE_TARGET_SQL).fetchone()
                self._noted.append((now, write_target(str(lsn), int(block_size))))
            cutoff = now - self.max_lag_s
            old = [i for i, (at, _) in enumerate(self._noted) if at <= cutoff]
            if old:  # keep the newest position old enough, and everything after it
                del self._noted[:old[-1]]
            at, position = self._noted[0]
            if at > cutoff or cutoff - at <= FRESHNESS_CHECK_S:
                return position
            return self._noted[-1][1]  # no position noted near the cutoff: the newest

    def _caught_up(self, conn: Any) -> bool:
        """Whether ``conn``'s replica has replayed every write this process committed,
        waiting at most :attr:`wait_s` for it."""
        import psycopg

        written = self.primary.writes
        seen = getattr(self._local, "seen", None)
        if written == 0 or (seen is not None and seen[0] is conn and seen[1] >= written):
            return True
        try:
            target = self._target_lsn(written)
        except (StoreError, psycopg.Error):
            return True  # the primary is gone (a failover): the replica is all there is
        deadline = time.monotonic() + self.wait_s
        while True:
            if _replayed(conn, target):
                self._local.seen = (conn, written)
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)

    def _target_lsn(self, written: int) -> str:
        """The primary's WAL insert position once ``written`` transactions were committed
        (asked once per count, whichever thread asks first)."""
        with self._target_lock:
            if self._target[0] >= written:
                return self._target[1]
            lsn, block_size = self.primary.connection().execute(WRITE_TARGET_SQL).fetchone()
            target = write_target(str(lsn), int(block_size))
            self._target = (written, target)
            return target

    # -- status ---------------------------------------------------------------------------

    def replica_status(self) -> list[ReplicaStatus]:
        """Each replica's replay position behind the primary's (bytes) and the age of the
        last transaction it replayed, read now on connections of their own."""
        import psycopg

        primary_lsn: int | None = None
        with contextlib.suppress(psycopg.Error, StoreError):
            (text,) = self.primary.connection().execute(
                "SELECT pg_current_wal_lsn()::text").fetchone()
            primary_lsn = lsn_value(text)
        found: list[ReplicaStatus] = []
        for url in self.urls:
            try:
                with psycopg.connect(url, autocommit=True,
                                     connect_timeout=_STATUS_TIMEOUT_S) as conn:
                    row: Any = conn.execute(
                        "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,"
                        " extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8"
                    ).fetchone()
                    standby, replayed, age = row
            except psycopg.Error as exc:
                found.append(ReplicaStatus(redacted(url), error=str(exc).strip()))
                continue
            position = lsn_value(replayed)
            behind = (max(primary_lsn - position, 0)
                      if primary_lsn is not None and position is not None else None)
            found.append(ReplicaStatus(redacted(url), standby=bool(standby),
                                       replay_lsn=replayed, lag_bytes=behind,
                                       last_replay_age_s=None if age is None else float(age)))
        return found


def _replayed(conn: Any, target: str) -> bool:
    """Whether ``conn``'s server has replayed the WAL up to ``target`` (a primary: always);
    False when it cannot be asked."""
    import psycopg

    try:
        (done,) = conn.execute(
            "SELECT NOT pg_is_in_recovery()"
            " OR coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)",
            (target,)).fetchone()
    except psycopg.Error:
        return False
    return bool(done)
