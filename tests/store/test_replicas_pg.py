"""Reads from a real streaming replica (``[store] read_urls``): a primary and a hot standby
made with ``pg_basebackup -R``, started by the tests (``tests/pg_replication.py``).

One pair and one index per module: a writer that knows only the primary builds it; a reader
configured with the standby answers the same callers the same way, runs a lookup's
statements on the standby (counted with ``pg_stat_statements`` on each server), and sees the
documents it indexed itself at once (read-your-writes), from the standby when it has
replayed them within ``read_wait_s``, else from the primary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.config import Settings, load_settings
from docgraph.governance import Caller, Governance, RoleAssignment, StaticEntitlements
from docgraph.serve.cli import app
from docgraph.serve.tools import DocgraphTools
from docgraph.store.postgres.replicas import ReplicaCatalog
from tests.helpers import CountingEmbedder, write_files
from tests.pg import PostgresServer
from tests.pg_replication import StandbyServer, replicated_pair, wait_replayed

GRANTS = StaticEntitlements([
    RoleAssignment("alice", "eng", "engineering"),
    RoleAssignment("alice", "support", "support"),
    RoleAssignment("bob", "support", "support"),
])
CALLERS = (Caller("alice"), Caller("bob"))
QUERIES = ("Which firmware fixes E-417 for Nordhaven?", "platinum response time",
           "Castellan recall escalation")


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[PostgresServer, StandbyServer]]:
    yield from replicated_pair()


def settings_for(folder: Path, url: str, read_urls: list[str], wait_s: float = 2.0
                 ) -> Settings:
    """Default settings (no docgraph.toml or DOCGRAPH_* of the machine) on ``url``."""
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("DOCGRAPH_"):
                patch.delenv(key)
        patch.setenv("DOCGRAPH_CONFIG", str(folder / "absent-docgraph.toml"))
        settings = load_settings()
    settings.store.backend = "postgres"
    settings.store.url = url
    settings.store.read_urls = read_urls
    settings.store.read_wait_s = wait_s
    return settings


@pytest.fixture(scope="module")
def indexes(pair, tmp_path_factory) -> Iterator[tuple[DocGraph, DocGraph]]:
    """(writer on the primary only, reader with the standby as its read replica)."""
    primary, standby = pair
    folder = tmp_path_factory.mktemp("replicas")
    url = primary.create_database("docgraph")
    writer = DocGraph(settings_for(folder, url, []), CountingEmbedder())
    writer.index(write_files(folder / "eng", {
        "firmware.md": "# Firmware\n\nTern T3 firmware 5.3.1 fixes E-417 for Nordhaven.\n",
        "private.md": '---\naccess: ["user:alice"]\n---\n# Recall\n\nCastellan recall '
                      "escalation, for alice only.\n",
    }), namespace="engineering")
    writer.index(write_files(folder / "sup", {
        "sla.md": "# SLA\n\nPlatinum customers get a 15 minute P1 response time.\n",
        "recall.md": "# Escalation\n\nA Castellan recall escalation goes to the duty lead.\n",
    }), namespace="support")
    wait_replayed(primary, standby)
    reader = DocGraph(settings_for(folder, url, [standby.url("docgraph")]), CountingEmbedder())
    try:
        yield writer, reader
    finally:
        reader.close()
        writer.close()


def _libpq(server: PostgresServer, database: str = "docgraph") -> str:
    return server.url(database).replace("+psycopg", "")


def _statements(server: PostgresServer) -> dict[str, int]:
    """Calls per statement text that ``pg_stat_statements`` counted in ``docgraph``."""
    with psycopg.connect(_libpq(server, "postgres"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT s.query, s.calls FROM pg_stat_statements s JOIN pg_database d"
            " ON d.oid = s.dbid WHERE d.datname = 'docgraph'").fetchall()
    return {str(q): int(c) for q, c in rows}


def _reset_statements(server: PostgresServer) -> None:
    with psycopg.connect(_libpq(server, "postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def _warm_governance(pair: tuple[PostgresServer, ...], reader: DocGraph) -> Governance:
    """A governed service over ``reader`` whose connections are open and caches warm (one
    lookup), with both servers' statement counts reset after it."""
    governance = Governance(reader, GRANTS)
    governance.lookup(Caller("alice"), QUERIES[0])
    for server in pair:
        _reset_statements(server)
    return governance


def _answers(graph: DocGraph) -> list[Any]:
    governance = Governance(graph, GRANTS)
    return [[governance.lookup(caller, q).to_dict(),
             [(h.doc_id, h.chunk_id, round(h.score, 6))
              for h in governance.search(caller, q, k=5, mode=mode)]]
            for caller in CALLERS for q in QUERIES for mode in ("vector_first", "hybrid")]


def test_answers_through_the_replica_equal_the_primarys(indexes):
    writer, reader = indexes
    assert isinstance(reader.query_store, ReplicaCatalog)
    through_replica = _answers(reader)
    assert through_replica == _answers(writer)
    # governance held on the copy: bob never sees alice's restricted document
    shown = repr(through_replica[len(QUERIES) * 2:])
    assert "for alice only" not in shown and "for alice only" in repr(through_replica)


def test_a_lookups_statements_reach_the_replica_not_the_primary(pair, indexes):
    primary, standby = pair
    _, reader = indexes
    governance = _warm_governance(pair, reader)
    governance.lookup(Caller("alice"), QUERIES[0])
    on_primary, on_replica = _statements(primary), _statements(standby)
    searched = ("postings", "chunks", "documents", "sources")
    assert [q for q in on_primary if any(t in q for t in searched)] == []
    assert any("postings" in q for q in on_replica)
    assert any("FROM chunks" in q for q in on_replica)
    # what a lookup writes (its audit record and traces) goes to the primary
    assert any("audit" in q for q in on_primary)
    assert reader.query_store.fallbacks == 0


def test_a_document_this_process_indexes_is_read_back_at_once(pair, indexes, tmp_path):
    _, standby = pair
    _, reader = indexes
    replica = reader.query_store
    assert isinstance(replica, ReplicaCatalog)
    reader.index(write_files(tmp_path / "a", {"kestrel.md": "# Kestrel\n\nKestrel K9 "
                                              "gearbox torque is 412 Nm.\n"}),
                 namespace="engineering")
    before = replica.fallbacks
    hits = reader.search("Kestrel gearbox torque", namespaces=["engineering"], k=3)
    assert hits and "Kestrel" in hits[0].text
    assert replica.fallbacks == before  # the standby replayed it within the bound

    with psycopg.connect(_libpq(standby), autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        try:
            replica.wait_s = 0.05
            reader.index(write_files(tmp_path / "b", {"osprey.md": "# Osprey\n\nOsprey O4 "
                                                      "winch load is 930 kg.\n"}),
                         namespace="engineering")
            hits = reader.search("Osprey winch load", namespaces=["engineering"], k=3)
            assert hits and "Osprey" in hits[0].text  # read from the primary
            assert replica.fallbacks > before
            lag = reader.status().replicas
            assert len(lag) == 1 and lag[0].standby and (lag[0].lag_bytes or 0) > 0
        finally:
            replica.wait_s = 2.0
            conn.execute("SELECT pg_wal_replay_resume()")
    paused_fallbacks = replica.fallbacks
    hits = reader.search("Osprey winch load", namespaces=["engineering"], k=3)
    assert hits and "Osprey" in hits[0].text
    assert replica.fallbacks == paused_fallbacks  # replayed now: the standby answers


def test_another_processs_write_is_read_within_the_staleness_bound(pair, indexes, tmp_path):
    """A write this process did not make (a build on another server: here the writer, which
    knows only the primary) is not waited for by read-your-writes; with the standby's replay
    paused, the reader would read the stale copy forever. Past read_max_lag_s (and the once a
    second check) it reads the primary instead, and the standby again once it replayed."""
    import time

    primary, standby = pair
    writer, reader = indexes
    replica = reader.query_store
    assert isinstance(replica, ReplicaCatalog)
    wait_replayed(primary, standby)
    assert not any("Plover" in h.text
                   for h in reader.search("Plover hoist brake", namespaces=["support"], k=3))
    with psycopg.connect(_libpq(standby), autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        try:
            replica.max_lag_s = 0.3
            writer.index(write_files(tmp_path / "other", {
                "plover.md": "# Plover\n\nThe Plover hoist brake is set to 57 bar.\n"}),
                namespace="support")
            time.sleep(1.5)  # past the bound and the once a second check
            before = replica.fallbacks
            hits = reader.search("Plover hoist brake", namespaces=["support"], k=3)
            assert hits and "Plover" in hits[0].text  # read from the primary
            assert replica.fallbacks > before
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")
    wait_replayed(primary, standby)
    time.sleep(1.1)
    after = replica.fallbacks
    hits = reader.search("Plover hoist brake", namespaces=["support"], k=3)
    assert hits and "Plover" in hits[0].text
    assert replica.fallbacks == after  # caught up: the standby answers again
    replica.max_lag_s = 10.0


def test_status_shows_each_replicas_lag(pair, indexes, tmp_path):
    primary, standby = pair
    _, reader = indexes
    wait_replayed(primary, standby)
    (replica,) = reader.status().replicas
    assert replica.url == standby.url("docgraph").replace("+psycopg", "")
    assert replica.standby and replica.error == "" and replica.lag_bytes is not None
    assert indexes[0].status().replicas == []  # the writer has none
    tools = DocgraphTools(Governance(reader, GRANTS))
    (shown,) = tools.call("index_status", Caller("bob"), {})["replicas"]
    assert shown["replica"] == 1 and shown["standby"] and shown["reachable"]
    assert isinstance(shown["lag_bytes"], int) and "url" not in shown
    # the operator's `docgraph status` names each replica (no password) with its lag
    config = tmp_path / "docgraph.toml"
    config.write_text(f'[store]\nbackend = "postgres"\nurl = "{reader.settings.store.url}"\n'
                      f'read_urls = ["{_libpq(standby)}"]\n[embed]\nmodel = "hashing"\n')
    done = CliRunner().invoke(app, ["--config", str(config), "status", "--json"])
    assert done.exit_code == 0, done.output
    (listed,) = json.loads(done.stdout)["replicas"]
    assert listed["url"] == _libpq(standby) and listed["standby"] and listed["error"] == ""
    done = CliRunner().invoke(app, ["--config", str(config), "status"])
    assert f"read replica {_libpq(standby)}: " in done.stdout and "bytes behind" in done.stdout


def _server_port(conn) -> int:  # type: ignore[no-untyped-def]
    return int(conn.execute("SELECT current_setting('port')").fetchone()[0])


def test_each_connection_picks_a_replica_that_answers_else_the_primary(pair, indexes):
    primary, standby = pair
    writer, _ = indexes
    gone = f"postgresql://postgres@127.0.0.1:{_closed_port()}/docgraph"
    for policy in ("round_robin", "least_lag"):
        replica = ReplicaCatalog(writer.store, [gone, standby.url("docgraph")],  # type: ignore[arg-type]
                                 policy)
        try:
            reads = [_server_port(replica.connection())]
            reads += _in_threads(replica, 3)
            assert set(reads) == {standby.port}, policy  # the unreachable one skipped
            assert replica.fallbacks == 0
        finally:
            replica.close()
    nowhere = ReplicaCatalog(writer.store, [gone])  # type: ignore[arg-type]
    try:  # no replica answers: the primary serves the read
        assert _server_port(nowhere.connection()) == primary.port
        assert nowhere.fallbacks == 1
        assert _server_port(nowhere.connection()) == primary.port  # not retried at once
    finally:
        nowhere.close()


def _closed_port() -> int:
    """A loopback port nothing listens on (connections are refused at once)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _in_threads(replica: ReplicaCatalog, count: int) -> list[int]:
    """The server port each of ``count`` new threads' connections reads from."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: _server_port(replica.connection()), range(count)))


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://reader:s3cret@r1:5432/db", "postgresql://reader:***@r1:5432/db"),
    ("postgresql://reader@r1/db?password=s3cret&sslmode=require",
     "postgresql://reader@r1/db?password=***&sslmode=require"),
    ("postgresql://r1,r2/db?sslpassword=k3y&target_session_attrs=read-write",
     "postgresql://r1,r2/db?sslpassword=***&target_session_attrs=read-write"),
    ("postgresql://reader@r1/db", "postgresql://reader@r1/db"),
])
def test_a_url_shown_in_status_never_carries_its_password(url: str, shown: str) -> None:
    """Replica and primary URLs appear in `docgraph status` and logs: a password given as a
    libpq parameter is masked like one in the user info."""
    from docgraph.store.postgres.catalog import redacted

    assert redacted(url) == shown


def _counts(graph: DocGraph, caller: Caller) -> dict[str, tuple[int, int, int]]:
    """Documents, chunks and pending chunks per namespace as ``index_status`` tells them."""
    shown = DocgraphTools(Governance(graph, GRANTS)).call("index_status", caller, {})
    return {n["namespace"]: (n["documents"], n["chunks"], n.get("pending_chunks", 0))
            for n in shown["namespaces"]}


def test_status_counts_come_from_one_server(pair, indexes, tmp_path):
    """The counts a caller is told are the totals less what it may not read: both from one
    snapshot of one server. Read from a standby that has not replayed a restricted document
    yet while the totals came from the primary, bob was told of alice's document."""
    primary, standby = pair
    writer, reader = indexes
    wait_replayed(primary, standby)
    with psycopg.connect(_libpq(standby), autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_pause()")
        try:
            writer.index(write_files(tmp_path / "memo", {
                "memo.md": '---\naccess: ["user:alice"]\n---\n# Memo\n\nThe Wrenfield '
                           "audit memo, for alice only.\n"}), namespace="support")
            assert _counts(reader, Caller("bob")) == _counts(writer, Caller("bob"))
            assert _counts(reader, Caller("alice")) == _counts(writer, Caller("alice"))
        finally:
            conn.execute("SELECT pg_wal_replay_resume()")
    wait_replayed(primary, standby)


def test_index_status_counts_pending_chunks_once(pair, indexes):
    """One pending-chunk count per index_status answer, on whichever server (the lifecycle's
    count was read, then replaced by the agents' count read again)."""
    _, reader = indexes
    _counts(reader, Caller("alice"))  # connections opened
    for server in pair:
        _reset_statements(server)
    _counts(reader, Caller("alice"))
    pending = [calls for server in pair for query, calls in _statements(server).items()
               if "embedding IS NULL" in query]
    assert sum(pending) == 1, pending


def test_a_governed_answer_runs_no_statement_only_to_count_pending_chunks(pair, indexes):
    """Each answer says how many chunks its dense lane skipped (pending): on PostgreSQL that
    count comes with the dense search's own first statement, not one more per answer."""
    _, reader = indexes
    governance = _warm_governance(pair, reader)
    governance.lookup(Caller("alice"), QUERIES[0])
    governance.search(Caller("bob"), QUERIES[1], k=5, mode="hybrid")
    counted = [calls for server in pair for query, calls in _statements(server).items()
               if "embedding IS NULL" in query and "chunk_counts" not in query]
    assert counted == []
