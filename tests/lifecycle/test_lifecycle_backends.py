"""Keeping an index fresh on every relational backend: SQL sources and column tags, refresh
runs recorded with their phase outcomes, ``reindex --full``, status with builds, one refresh
leader across real processes (taken over when it is killed), and ``migrate`` carrying the
registry and the history along."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import RefreshBusy
from docgraph.lifecycle import PHASES
from docgraph.sources.urn import normalize_urn
from tests.conftest import REPO
from tests.helpers import CountingEmbedder, write_files
from tests.pg import pgvector_server  # noqa: F401  (fixture used by the postgres backend)
from tests.store_backends import Backend, EmbeddedBackend, PostgresBackend

HR = {
    "leave.md": "# Leave\n\n## Parental leave\n\nStaff get twenty weeks of parental leave.\n",
    "travel.md": "# Travel\n\nBook trains to Rotterdam through the Heron portal.\n",
}
DEADLINE_S = 90.0  # generous: a bound on waiting, never an assertion of speed


@pytest.fixture(params=["embedded", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made: Backend = (EmbeddedBackend if request.param == "embedded"
                     else PostgresBackend)(request, tmp_path)  # type: ignore[operator]
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def open_graph(backend: Backend) -> Iterator[Callable[[], DocGraph]]:
    opened: list[DocGraph] = []

    def make() -> DocGraph:
        graph = DocGraph(load_settings(store=backend.store_settings()),  # type: ignore[arg-type]
                         CountingEmbedder())
        opened.append(graph)
        return graph

    yield make
    for graph in opened:
        graph.close()


def _store_env(backend: Backend) -> dict[str, str]:
    """``DOCGRAPH_*`` variables that make a CLI or another process open this backend."""
    settings = backend.store_settings()
    env = {"DOCGRAPH_STORE__BACKEND": str(settings["backend"]),
           "DOCGRAPH_EMBED__MODEL": "hashing"}
    if settings["backend"] == "postgres":
        env["DOCGRAPH_STORE__URL"] = str(settings["url"])
    else:
        env["DOCGRAPH_STORE__PATH"] = str(settings["path"])
    return env


def _crm(tmp_path: Path) -> str:
    import sqlalchemy as sa

    url = f"sqlite:///{tmp_path / 'crm.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE tickets (id INTEGER PRIMARY KEY, body TEXT)")
        conn.exec_driver_sql("INSERT INTO tickets VALUES (1, 'Heron portal is down again.'),"
                             " (2, 'The Kestrel lidar is blocked.')")
    engine.dispose()
    return url


def test_cli_sources_tags_refresh_reindex_and_status(backend: Backend, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     open_graph: Callable[[], DocGraph]) -> None:
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    for key, value in _store_env(backend).items():
        monkeypatch.setenv(key, value)
    folder = write_files(tmp_path / "docs", HR)
    crm = _crm(tmp_path)
    runner = CliRunner()

    def run(*args: str) -> str:
        done = runner.invoke(app, list(args))
        assert done.exit_code == 0, (args, done.output)
        return done.output

    run("sources", "add", str(folder), "--domain", "hr")
    run("sources", "add-sql", "crm", crm)
    run("sources", "add-sql", "vault", "postgresql://reader:s3cret@db.example/vault")
    run("tags", "set", "crm", "tickets.body", "natural_language", "--domain", "support")
    listed = run("sources", "list", "--json")
    assert "s3cret" not in listed
    assert sorted((s["kind"], s["domain"], s["urn"]) for s in json.loads(listed)) == sorted([
        ("documents", "hr", normalize_urn(folder)),
        ("relational", None, crm),
        ("relational", None, "postgresql://reader@db.example/vault"),
        ("table", "support", "sql://crm/main.tickets.body"),
    ])
    [tag] = json.loads(run("tags", "list", "--json"))
    assert (tag["source"], tag["table"], tag["column"], tag["pk_column"]) == \
        ("crm", "tickets", "body", "id")

    run("refresh")
    status = json.loads(run("status", "--json"))
    assert {b["namespace"]: (b["last_outcome"], b["documents"]) for b in status["builds"]} == {
        "hr": ("ok", 2), "support": ("ok", 2)}
    assert status["refresh_leader"] is None  # the refresh released the leadership
    assert "refresh led by no process" in run("status")

    run("reindex", "--full")
    graph = open_graph()
    builds = graph.build_history.recent("hr")
    assert [b.outcome for b in builds] == ["ok", "ok"]
    crawl = next(p for p in builds[0].phases if p.phase == "crawl")
    assert crawl.message == "2 listed, 2 fetched"  # the full re-index read every file again
    assert {ns.namespace: ns.chunks > 0 for ns in graph.status().namespaces} == {
        "hr": True, "support": True}
    assert graph.search("parental leave", namespaces={"hr"}, k=1)[0].source_path == "leave.md"

    assert "2 document(s) deleted" in run("tags", "remove", "crm", "tickets.body",
                                          "natural_language")
    assert graph.namespaces() == ["hr"]  # the derived table source went with its tag
    run("sources", "remove-sql", "crm")
    run("sources", "remove-sql", "vault")
    run("sources", "remove", str(folder), "--domain", "hr")
    assert json.loads(run("sources", "list", "--json")) == []
    assert json.loads(run("tags", "list", "--json")) == []


def test_a_refresh_is_recorded_with_its_phase_outcomes(backend: Backend, tmp_path: Path,
                                                       open_graph: Callable[[], DocGraph]) -> None:
    graph = open_graph()
    hr = write_files(tmp_path / "hr", HR)
    graph.sources.add_folder(hr, "hr")
    first = graph.refresher.run_once()
    assert [b.outcome for b in first.builds] == ["ok"]
    hr.rename(tmp_path / "hr-moved")  # the folder vanishes: its crawl fails
    second = graph.refresher.run_once()
    assert not second.ok

    reopened = open_graph()  # another handle on the same store sees the same records
    builds = reopened.build_history.recent("hr")
    assert [b.id for b in builds] == [second.builds[0].id, first.builds[0].id]
    assert [b.outcome for b in builds] == ["error", "ok"]
    urn = normalize_urn(hr)
    assert [(p.phase, p.outcome) for p in builds[0].phases if p.source == urn] == \
        [("crawl", "error")] + [(phase, "skipped") for phase in PHASES[1:6]]
    assert [p.phase for p in builds[1].phases if p.source == urn] == list(PHASES[:6])
    assert "not found" in builds[0].errors[0].message
    [status] = reopened.status().builds
    assert (status.namespace, status.last_outcome, status.documents) == ("hr", "error", 2)
    assert status.last_success_at == builds[1].finished_at and not status.overdue


# -- one leader across processes ------------------------------------------------------------


def _lines(log: Path) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text(encoding="utf-8").splitlines():
        word, pid = line.split()
        out.append((word, int(pid)))
    return out


def _wait_for(what: str, condition: Callable[[], bool], processes: list[subprocess.Popen[bytes]],
              ) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        for process in processes:
            if process.poll() is not None:
                raise AssertionError(f"refresher process {process.pid} exited "
                                     f"({process.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {DEADLINE_S:.0f}s waiting for {what}")
        time.sleep(0.2)


def _no_overlap(lines: list[tuple[str, int]]) -> None:
    """Every build ends before the next one begins (in whichever process)."""
    builds = [(word, pid) for word, pid in lines if word in ("begin", "end")]
    for i in range(0, len(builds) - 1, 2):
        assert builds[i][0] == "begin" and builds[i + 1] == ("end", builds[i][1]), builds


def test_one_process_refreshes_and_another_takes_over_when_it_is_killed(
        backend: Backend, tmp_path: Path, open_graph: Callable[[], DocGraph]) -> None:
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    graph = open_graph()
    graph.sources.add_folder(write_files(tmp_path / "hr", HR), "hr")
    log = tmp_path / "builds.log"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("DOCGRAPH_")},
           **_store_env(backend), "DOCGRAPH_REFRESH__INTERVAL_SECONDS": "1",
           "DOCGRAPH_CONFIG": str(tmp_path / "absent.toml"),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO)])}
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.out").open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.refresh_leader_child", str(log)],
                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        processes.append(process)
        return process

    host = socket.gethostname()
    try:
        first = spawn("first")
        _wait_for("the first process to build",
                  lambda: ("end", first.pid) in _lines(log), processes)
        second = spawn("second")
        _wait_for("the second process to start", lambda: ("ready", second.pid) in _lines(log),
                  processes)
        ready_at = _lines(log).index(("ready", second.pid))
        # The second one retries every second; three more builds of the first give it several
        # chances to build concurrently.
        _wait_for("three more builds of the leader",
                  lambda: _lines(log)[ready_at:].count(("end", first.pid)) >= 3, processes)
        assert ("begin", second.pid) not in _lines(log)
        _no_overlap(_lines(log))
        assert graph.refresher.leader() == f"{first.pid}@{host}"
        assert graph.status().refresh_leader == f"{first.pid}@{host}"

        # An explicit refresh elsewhere does not build beside the leader: it names it.
        with pytest.raises(RefreshBusy, match=f"{first.pid}@"):
            graph.refresher.run_once()
        done = CliRunner().invoke(app, ["refresh"], env=_store_env(backend))
        assert done.exit_code == 1 and f"led by {first.pid}@" in done.output

        first.send_signal(signal.SIGKILL)
        first.wait()
        processes.remove(first)
        _wait_for("the second process to take over",
                  lambda: ("end", second.pid) in _lines(log), processes)
        assert graph.refresher.leader() == f"{second.pid}@{host}"
        before_kill = _lines(log)[: _lines(log).index(("begin", second.pid))]
        assert all(pid == first.pid for word, pid in before_kill if word != "ready")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    _wait_for("the leadership to end with its process", lambda: graph.refresher.leader() is None,
              [])
    recorded = graph.build_history.recent("hr", limit=1000)
    assert {b.outcome for b in recorded} == {"ok"} and len(recorded) >= 5


def test_an_explicit_refresh_waits_for_the_leader_to_stop(backend: Backend, tmp_path: Path,
                                                          open_graph: Callable[[], DocGraph]
                                                          ) -> None:
    leader, other = open_graph(), open_graph()
    leader.sources.add_folder(write_files(tmp_path / "hr", HR), "hr")
    assert leader.refresher.run_once().ok and not leader.refresher.leading
    assert leader.leader_lock.try_acquire()  # leads (as a background loop would)
    with pytest.raises(RefreshBusy, match="led by "):
        other.refresher.run_once()
    with pytest.raises(RefreshBusy, match="led by "):  # a full re-index would be refused too
        other.reindex_full()
    with pytest.raises(RefreshBusy, match="nothing was changed"):
        other.admin.update({"embed.model": "e5-small-4bit"}, is_admin=True, full_reindex=True,
                           persist=False)
    assert other.settings.embed.model != "e5-small-4bit"
    assert other.search("parental leave", namespaces={"hr"}, k=1)  # no vector was dropped
    leader.leader_lock.release()
    result = other.refresher.run_once(wait_seconds=DEADLINE_S)
    assert [b.outcome for b in result.builds] == ["ok"]
    assert other.refresher.leader() is None  # an explicit run leads only while it builds


# -- migrate --------------------------------------------------------------------------------


@pytest.mark.postgres  # PostgresBackend: the migration's target
def test_migrate_copies_sql_sources_tags_and_build_history(request: pytest.FixtureRequest,
                                                           tmp_path: Path) -> None:
    from docgraph.store.migrate import migrate_to_postgres
    from docgraph.store.postgres import PostgresCatalog
    from docgraph.store.sqlite import SQLiteCatalog

    embedded = DocGraph(load_settings(store={"path": tmp_path / "index.db"}), CountingEmbedder())
    target = PostgresBackend(request, tmp_path)
    try:
        embedded.sources.add_folder(write_files(tmp_path / "hr", HR), "hr",
                                    display_name="people", public_url="https://hr.example/")
        embedded.sources.add_sql_source("crm", _crm(tmp_path))
        embedded.sources.set_tag("crm", "tickets", "body", "natural_language", domain="support")
        embedded.refresher.run_once()
        embedded.refresher.run_once()
        sql_sources, tags = embedded.sources.sql_sources(), embedded.sources.tags()
        history = embedded.build_history.recent(limit=100)
        embedded.close()

        source, copy = SQLiteCatalog(tmp_path / "index.db"), PostgresCatalog(target.url)
        try:
            report = migrate_to_postgres(source, copy)
        finally:
            source.close()
            copy.close()
        assert (report.sql_sources, report.column_tags, report.builds) == (1, 1, 4)

        embedder = CountingEmbedder()
        moved = DocGraph(load_settings(store=target.store_settings()),  # type: ignore[arg-type]
                         embedder)
        try:
            assert moved.sources.sql_sources() == sql_sources
            assert moved.sources.tags() == tags
            folder = next(s for s in moved.store.list_sources() if s.namespace == "hr")
            assert (folder.display_name, folder.public_url) == ("people",
                                                                "https://hr.example/")
            copied = moved.build_history.recent(limit=100)
            assert [(b.namespace, b.outcome, b.started_at, [(p.source, p.phase, p.outcome)
                                                             for p in b.phases])
                    for b in copied] == \
                [(b.namespace, b.outcome, b.started_at, [(p.source, p.phase, p.outcome)
                                                         for p in b.phases]) for b in history]
            result = moved.refresher.run_once()  # the registry works there: nothing changed
            assert {b.namespace for b in result.builds} == {"hr", "support"}
            assert embedder.embedded == 0 and result.ok
        finally:
            moved.close()
    finally:
        target.close()


@pytest.mark.postgres  # PostgresBackend
def test_a_leader_whose_session_the_server_ended_stops_leading(request: pytest.FixtureRequest,
                                                               tmp_path: Path) -> None:
    import psycopg

    from docgraph.store.postgres import PostgresCatalog, connection_url
    from docgraph.store.postgres.leader import SERVER_KEEPALIVES, PostgresLeaderLock
    from docgraph.store.postgres.schema import LEADER_LOCK_KEYS

    database = PostgresBackend(request, tmp_path)
    PostgresCatalog(database.url).close()  # the schema, as any opener creates it
    first, second = (PostgresLeaderLock(database.url, identity=name)
                     for name in ("first@a", "second@b"))
    try:
        assert first.holder() is None
        assert first.try_acquire() and not second.try_acquire()
        assert second.holder() == "first@a"
        with psycopg.connect(connection_url(database.url), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype ="
                          " 'advisory' AND classid::bigint = %s AND objid::bigint = %s",
                          LEADER_LOCK_KEYS)
        _wait_for("the second lock to take over", second.try_acquire, [])
        assert not first.try_acquire()  # its session is gone, and the leadership with it
        assert not first.held and first.holder() == "second@b"
        # A leader whose machine vanishes closes no socket: the server's keepalives on the
        # lock's session end it (and free the lock) within about 25 s instead of hours.
        settings = dict(second._conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name LIKE 'tcp_keepalives%'"
        ).fetchall())
        assert settings == {name: str(value) for name, value in SERVER_KEEPALIVES.items()}
    finally:
        first.close()
        second.close()
        database.close()


def test_an_index_file_of_an_earlier_docgraph_keeps_its_registry_and_history(
        tmp_path: Path) -> None:
    import sqlite3

    from docgraph.store.sqlite import SQLiteCatalog

    path = tmp_path / "index.db"
    SQLiteCatalog(path).close()
    db = sqlite3.connect(path)  # the tables and rows as the registry and history wrote them
    db.executescript("""
        CREATE TABLE sql_sources (name TEXT PRIMARY KEY, url TEXT NOT NULL,
                                  created_at REAL NOT NULL);
        CREATE TABLE column_tags (id INTEGER PRIMARY KEY,
            source TEXT NOT NULL REFERENCES sql_sources(name) ON DELETE CASCADE,
            schema_name TEXT NOT NULL, table_name TEXT NOT NULL, column_name TEXT NOT NULL,
            pk_column TEXT, tag TEXT NOT NULL, domain TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            UNIQUE (source, schema_name, table_name, column_name, tag, domain));
        CREATE TABLE build_runs (id INTEGER PRIMARY KEY AUTOINCREMENT, namespace TEXT NOT NULL,
            started_at REAL NOT NULL, finished_at REAL NOT NULL, outcome TEXT NOT NULL,
            documents_changed INTEGER NOT NULL DEFAULT 0,
            chunks_embedded INTEGER NOT NULL DEFAULT 0, bodies_read INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE build_phases (
            build_id INTEGER NOT NULL REFERENCES build_runs(id) ON DELETE CASCADE,
            ordinal INTEGER NOT NULL, source TEXT NOT NULL, phase TEXT NOT NULL,
            outcome TEXT NOT NULL, message TEXT NOT NULL, items INTEGER NOT NULL,
            seconds REAL NOT NULL, PRIMARY KEY (build_id, ordinal));
        INSERT INTO sql_sources VALUES ('crm', 'sqlite:////srv/crm.db', 1.0);
        INSERT INTO column_tags VALUES (1, 'crm', 'main', 'products', 'name', NULL,
                                        'entity:product', '', 1.0);
        INSERT INTO build_runs VALUES (7, 'hr', 10.0, 12.0, 'ok', 2, 3, 2);
        INSERT INTO build_phases VALUES (7, 0, 'file:///hr', 'crawl', 'ok',
                                         '2 listed, 2 fetched', 2, 0.5);
    """)
    db.close()
    graph = DocGraph(load_settings(store={"path": path}), CountingEmbedder())
    try:
        assert [(s.name, s.url) for s in graph.sources.sql_sources()] == \
            [("crm", "sqlite:////srv/crm.db")]
        assert [t.entity_type for t in graph.sources.tags()] == ["product"]
        [build] = graph.build_history.recent()
        assert (build.id, build.namespace, build.outcome, build.finished_at) == \
            (7, "hr", "ok", 12.0)
        assert [(p.phase, p.message) for p in build.phases] == [("crawl", "2 listed, 2 fetched")]
    finally:
        graph.close()
