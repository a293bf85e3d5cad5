"""Backup, restore and upgrade of an index kept in PostgreSQL, on a throwaway server with
pgvector and its own client programs.

What must hold: ``docgraph backup`` on a PostgreSQL store writes a checked ``pg_dump
--format=custom`` of docgraph's database (no password on any command line), which the
restore steps ``docgraph restore`` prints (create a database, the extensions,
``pg_restore``) turn into a database that answers as the source did; bad input is refused
naming it; and a database at the oldest schema the tests can make (migration 11, see
``tests/pg.MIGRATION_UNDO``) is migrated forward to this release's with its documents and
chunks kept and the same answers.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import StoreError
from docgraph.store.postgres.dump import dump_database
from tests import pg
from tests.backend_graphs import fresh_database
from tests.deployment import Deployment, postgres_store
from tests.helpers import CountingEmbedder, write_files

pytestmark = pytest.mark.postgres

POLICY = "assignments:\n  - {user: alice, role: ops, domain: ops}\n"
CORPUS = {
    "runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n",
    "leave.md": "# Leave\n\nStaff get twenty weeks of parental leave after a birth.\n",
    "outage.md": "# Rotterdam outage\n\nThe Rotterdam depot lost power for six hours.\n",
}
QUERIES = ("Kestrel lidar E-417", "parental leave", "Rotterdam power")


def _answers(graph: DocGraph) -> dict[str, list[str]]:
    return {q: [hit.chunk_id for hit in graph.search(q, namespaces={"ops"}, k=3)]
            for q in QUERIES}


def _graph(url: str) -> DocGraph:
    settings = load_settings()
    settings.store.backend = "postgres"
    settings.store.url = url
    return DocGraph(settings, CountingEmbedder())


def _client_env(server: pg.PostgresServer) -> dict[str, str]:
    """The environment with the server's own client programs first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{server.bindir}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_backup_dumps_the_database_and_the_printed_steps_restore_it(
        pgvector_server: pg.PostgresServer, tmp_path: Path) -> None:
    name, url = fresh_database(pgvector_server)
    restored_name = f"r_{uuid.uuid4().hex[:12]}"
    deployment = Deployment(tmp_path, postgres_store(url), POLICY)
    deployment.env["PATH"] = _client_env(pgvector_server)["PATH"]
    try:
        with _graph(url) as graph:
            graph.index(write_files(tmp_path / "ops", CORPUS), "ops")
            want = _answers(graph)
        dump = tmp_path / "docgraph.dump"
        said = deployment.run("backup", str(dump))
        assert "checked with pg_restore --list" in " ".join(said.split())
        assert dump.is_file() and dump.read_bytes()[:5] == b"PGDMP"

        steps = deployment.attempt("restore", str(dump))
        assert steps.returncode == 1  # docgraph does not restore a database itself
        printed = " ".join(steps.stderr.split())
        assert "CREATE EXTENSION IF NOT EXISTS vector" in printed
        assert f"pg_restore --no-owner --exit-on-error --dbname=docgraph_restored {dump}" \
            in printed
        # the printed steps, against the throwaway server
        pgvector_server.create_database(restored_name)
        for extension in ("vector", "unaccent"):
            pgvector_server.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}",
                                    restored_name)
        done = subprocess.run(
            [str(pgvector_server.bindir / "pg_restore"), "--no-owner", "--exit-on-error",
             "--host=127.0.0.1", f"--port={pgvector_server.port}", "--username=postgres",
             f"--dbname={restored_name}", str(dump)],
            capture_output=True, text=True, check=False, timeout=120)
        assert done.returncode == 0, done.stderr
        with _graph(pgvector_server.url(restored_name)) as restored:
            assert _answers(restored) == want
    finally:
        pgvector_server.drop_database(name)
        pgvector_server.drop_database(restored_name)


def test_a_dump_is_refused_naming_the_file_or_the_database(
        pgvector_server: pg.PostgresServer, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _client_env(pgvector_server)["PATH"])
    taken = tmp_path / "taken.dump"
    taken.write_text("mine")
    with pytest.raises(StoreError, match=f"{taken} already exists"):
        dump_database(pgvector_server.url("postgres"), taken)
    empty = f"e_{uuid.uuid4().hex[:12]}"
    url = pgvector_server.create_database(empty)
    try:
        with pytest.raises(StoreError, match=f"/{empty} is not a docgraph database: its dump "
                                             f".*no table schema_migrations"):
            dump_database(url, tmp_path / "empty.dump")
        assert not list(tmp_path.glob("*empty.dump*"))  # no partial file left
    finally:
        pgvector_server.drop_database(empty)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StoreError, match="pg_dump is not on PATH"):
        dump_database(url, tmp_path / "x.dump")


def test_the_migrations_from_the_oldest_version_keep_the_data(
        pgvector_server: pg.PostgresServer, tmp_path: Path) -> None:
    from docgraph.store.postgres.schema import SCHEMA_VERSION

    oldest = min(pg.MIGRATION_UNDO) - 1
    name, url = fresh_database(pgvector_server)
    try:
        with _graph(url) as graph:
            graph.index(write_files(tmp_path / "ops", CORPUS), "ops")
            want = _answers(graph)
            db = graph.store.connection()
            counts = db.execute("SELECT (SELECT count(*) FROM documents), "
                                "(SELECT count(*) FROM chunks)").fetchone()
            pg.roll_back_migrations(db, oldest)
            assert db.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] \
                == oldest
        with _graph(url) as upgraded:
            db = upgraded.store.connection()
            versions = [row[0] for row in db.execute(
                "SELECT version FROM schema_migrations ORDER BY version")]
            assert versions == list(range(1, SCHEMA_VERSION + 1))
            assert db.execute("SELECT (SELECT count(*) FROM documents), "
                              "(SELECT count(*) FROM chunks)").fetchone() == counts
            assert _answers(upgraded) == want
    finally:
        pgvector_server.drop_database(name)
