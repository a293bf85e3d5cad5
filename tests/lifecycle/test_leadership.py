"""Every build of an index runs as its one leader, on the embedded file and on PostgreSQL:
``index``, ``remove_folder`` and ``build_graph`` (Python API and CLI) refuse to build beside
another process that leads - or wait for it - and change nothing when refused; a process
that leads (its refresh loop, or a build inside a build) never waits on itself; and
``index_status`` names the leader to every caller, with only the caller's namespaces.

Two handles on one index stand for two processes: their leader locks exclude each other
like two processes' do (an advisory lock per connection, an ``flock`` per open file); the
real processes are ``tests/serve/test_serve_refresh.py``'s."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from docgraph import DocGraph
from docgraph.errors import RefreshBusy
from docgraph.governance import (
    CallableRowAuthorizer,
    Caller,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from docgraph.serve.tools import DocgraphTools
from tests import backend_graphs
from tests.conftest import REPO
from tests.helpers import write_files

make_graph = backend_graphs.make_graph
pgvector_server = backend_graphs.pgvector_server

HR = {"leave.md": "# Leave\n\nStaff get twenty weeks of parental leave.\n"}
OPS = {"runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n"}
DEADLINE_S = 60.0  # a bound on waiting, never an assertion of speed


def _in_thread(what: str, work: Callable[[], Any]) -> Any:
    """Run ``work`` in a thread and fail (instead of hanging) if it does not finish."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(work())
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"{what} did not finish within {DEADLINE_S:.0f}s (deadlock?)"
    if errors:
        raise errors[0]
    return out[0]


def test_index_remove_and_graph_builds_are_refused_while_another_process_leads(
        tmp_path: Path, make_graph: Callable[..., DocGraph]) -> None:
    leader, other = make_graph(), make_graph()
    hr, ops = write_files(tmp_path / "hr", HR), write_files(tmp_path / "ops", OPS)
    other.index(hr, "hr")
    assert not other.leadership.leading  # an explicit build leads only while it builds
    chunks = {s.namespace: s.chunks for s in other.store.stats()}

    assert leader.leader_lock.try_acquire()  # leads, as a serving process's loop would
    with pytest.raises(RefreshBusy, match=f"led by {leader.leader_lock.identity}") as refused:
        other.index(ops, "ops")
    assert "docgraph sources add" in str(refused.value)  # says what to do instead
    assert other.namespaces() == ["hr"]  # nothing registered, nothing built
    with pytest.raises(RefreshBusy, match="led by "):
        other.remove_folder(hr, "hr")
    with pytest.raises(RefreshBusy, match="led by "):
        other.build_graph(["hr"])
    started = time.monotonic()
    with pytest.raises(RefreshBusy, match=r"waited 0\.5s"):
        other.index(ops, "ops", wait_seconds=0.5)
    assert time.monotonic() - started >= 0.5
    assert {s.namespace: s.chunks for s in other.store.stats()} == chunks

    # Waiting: the build starts as soon as the leader stops, not before.
    release = threading.Timer(0.5, leader.leader_lock.release)
    release.start()
    report = other.index(ops, "ops", wait_seconds=DEADLINE_S)
    release.join()
    assert len(report.added) == 1 and not other.leadership.leading
    assert other.remove_folder(hr, "hr", wait_seconds=DEADLINE_S) == 1
    assert other.namespaces() == ["ops"] and leader.leadership.leader() is None



def test_registry_removals_are_elected_too(tmp_path: Path,
                                           make_graph: Callable[..., DocGraph]) -> None:
    import sqlalchemy as sa

    leader, other = make_graph(), make_graph()
    crm = f"sqlite:///{tmp_path / 'crm.db'}"
    engine = sa.create_engine(crm)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE tickets (id INTEGER PRIMARY KEY, body TEXT)")
        conn.exec_driver_sql("INSERT INTO tickets VALUES (1, 'The Heron portal is down.')")
    engine.dispose()
    other.sources.add_folder(write_files(tmp_path / "hr", HR), "hr")
    other.sources.add_sql_source("crm", crm)
    other.sources.set_tag("crm", "tickets", "body", "natural_language", domain="support")
    assert other.refresher.run_once().ok
    before = {s.namespace: s.documents for s in other.store.stats()}
    assert before == {"hr": 1, "support": 1}

    assert leader.leader_lock.try_acquire()
    registry = other.sources
    for remove in (lambda: registry.remove_tag("crm", "tickets", "body", "natural_language"),
                   lambda: registry.remove_sql_source("crm"),
                   lambda: registry.remove_folder(tmp_path / "hr", "hr")):
        with pytest.raises(RefreshBusy, match=f"led by {leader.leader_lock.identity}"):
            remove()
    assert {s.namespace: s.documents for s in other.store.stats()} == before
    assert len(registry.tags()) == 1 and len(registry.sql_sources()) == 1

    threading.Timer(0.5, leader.leader_lock.release).start()
    assert registry.remove_sql_source("crm", wait_seconds=DEADLINE_S) == 1
    assert registry.remove_folder(tmp_path / "hr", "hr") == 1
    assert registry.tags() == [] and other.namespaces() == []

def test_a_process_that_leads_builds_without_waiting_on_itself(
        tmp_path: Path, make_graph: Callable[..., DocGraph]) -> None:
    graph, other = make_graph(), make_graph()
    graph.add_folder(write_files(tmp_path / "hr", HR), "hr")
    graph.settings.refresh.interval_seconds = 3600.0
    refresher = graph.refresher
    refresher.start()  # the loop leads and keeps leading between rounds
    try:
        deadline = time.monotonic() + DEADLINE_S
        while refresher.runs < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert refresher.runs == 1 and refresher.leading
        ops = write_files(tmp_path / "ops", OPS)
        report = _in_thread("index beside this process's own loop",
                            lambda: graph.index(ops, "ops"))
        assert len(report.added) == 1
        assert graph.leadership.leading  # the loop still leads after the API call
        # A build inside a build (a before_build callback) does not wait on itself either.
        result = _in_thread("a build inside a refresh", lambda: refresher.run_once(
            before_build=lambda: graph.build_graph(["ops"])))
        assert [b.namespace for b in result.builds] == ["hr", "ops"]
        with pytest.raises(RefreshBusy, match="led by "):
            other.index(ops, "ops")
    finally:
        assert refresher.stop(timeout=DEADLINE_S)
    assert not graph.leadership.leading and other.leader_lock.try_acquire()
    other.leader_lock.release()


def test_the_cli_index_exits_1_naming_the_leader(tmp_path: Path,
                                                 make_graph: Callable[..., DocGraph],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from docgraph.serve.cli import app

    leader = make_graph()
    folder = write_files(tmp_path / "hr", HR)
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    backend_graphs.point_the_cli_at(leader, monkeypatch)
    base = ["--index", str(leader.settings.store.path)]
    assert leader.leader_lock.try_acquire()
    runner = CliRunner()
    for command in (["index", str(folder), "-n", "hr", "--wait", "0.3"],
                    ["sources", "remove", str(folder), "--domain", "hr"],
                    ["graph", "build"]):
        done = runner.invoke(app, [*base, *command])
        assert done.exit_code == 1, (command, done.output)
        assert f"led by {leader.leader_lock.identity}" in " ".join(done.output.split())
    assert leader.namespaces() == []
    leader.leader_lock.release()
    done = runner.invoke(app, [*base, "index", str(folder), "-n", "hr"])
    assert done.exit_code == 0, done.output
    assert leader.namespaces() == ["hr"]


def test_index_status_names_the_leader_within_the_callers_namespaces(
        tmp_path: Path, make_graph: Callable[..., DocGraph]) -> None:
    graph, other = make_graph(), make_graph()
    graph.add_folder(write_files(tmp_path / "hr", HR), "hr")
    graph.add_folder(write_files(tmp_path / "ops", OPS), "ops")
    assert graph.refresher.run_once().ok
    everyone = CallableRowAuthorizer(lambda caller, table, pks: set(pks))
    entitled = StaticEntitlements([RoleAssignment("alice", "hr", "hr"),
                                   RoleAssignment("root", "admin", "*")])
    tools = DocgraphTools(Governance(graph, entitled, everyone))

    def status(user: str) -> dict[str, Any]:
        return tools.call("index_status", Caller(user), {})

    assert status("alice")["refresh"] == {"leader": None, "this_process_leads": False,
                                          "refresher_running": False,
                                          "interval_seconds": 900.0}
    assert other.leader_lock.try_acquire()  # another process leads
    alice = status("alice")
    assert alice["refresh"]["leader"] == other.leader_lock.identity
    assert alice["refresh"]["this_process_leads"] is False
    assert [(n["namespace"], n["last_outcome"]) for n in alice["namespaces"]] == [("hr", "ok")]
    assert [n["namespace"] for n in status("root")["namespaces"]] == ["hr", "ops"]
    other.leader_lock.release()

    assert graph.leader_lock.try_acquire()  # the answering process leads
    alice = status("alice")
    assert alice["refresh"]["leader"] == graph.leader_lock.identity
    assert alice["refresh"]["this_process_leads"] is True
    assert [n["namespace"] for n in alice["namespaces"]] == ["hr"]
    graph.leader_lock.release()


def test_cli_status_is_the_callers_view_and_names_the_leader(
        tmp_path: Path, make_graph: Callable[..., DocGraph],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from docgraph.governance import AccessDenied
    from docgraph.serve.cli import app

    graph, other = make_graph(), make_graph()
    graph.add_folder(write_files(tmp_path / "hr", HR), "hr")
    graph.add_folder(write_files(tmp_path / "ops", OPS), "ops")
    assert graph.refresher.run_once().ok
    policy = tmp_path / "policy.yaml"
    policy.write_text("assignments:\n  - {user: alice, role: hr, domain: hr}\n",
                      encoding="utf-8")
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    backend_graphs.point_the_cli_at(graph, monkeypatch)
    base = ["--index", str(graph.settings.store.path)]
    runner = CliRunner()
    assert other.leader_lock.try_acquire()

    owner = json.loads(runner.invoke(app, [*base, "status", "--json"]).stdout)
    assert [b["namespace"] for b in owner["builds"]] == ["hr", "ops"]  # no [governance]
    monkeypatch.setenv("DOCGRAPH_GOVERNANCE__POLICY_FILE", str(policy))
    denied = runner.invoke(app, [*base, "status", "--json"])
    assert denied.exit_code == 1 and isinstance(denied.exception, AccessDenied)
    done = runner.invoke(app, [*base, "--user", "alice", "status", "--json"])
    assert done.exit_code == 0, done.output
    alice = json.loads(done.stdout)
    assert [(b["namespace"], b["last_outcome"]) for b in alice["builds"]] == [("hr", "ok")]
    assert [n["namespace"] for n in alice["namespaces"]] == ["hr"]
    assert [s["namespace"] for s in alice["sources"]] == ["hr"]
    assert alice["refresh_leader"] == other.leader_lock.identity
    text = runner.invoke(app, [*base, "--user", "alice", "status"]).output
    assert f"refresh led by {other.leader_lock.identity} (every 900s)" in " ".join(text.split())
    other.leader_lock.release()


@backend_graphs.embedded_only
def test_in_serve_is_an_admin_setting_that_applies_at_the_next_serve_start(
        make_graph: Callable[..., DocGraph]) -> None:
    graph = make_graph()
    assert graph.settings.refresh.in_serve  # serve refreshes unless turned off
    update = graph.admin.update({"refresh.in_serve": "false"}, is_admin=True, persist=False)
    assert update.changed == {"refresh": {"in_serve": False}}
    assert update.restart_required == ["refresh.in_serve"]


def test_the_numbers_the_docs_quote_are_the_codes() -> None:
    from docgraph.config import RefreshSettings
    from docgraph.lifecycle.refresher import LEADER_RETRY_SECONDS
    from docgraph.serve.http import REFRESHER_STOP_SECONDS
    from docgraph.store.postgres.leader import SERVER_KEEPALIVES

    repo = REPO

    def flat(name: str) -> str:
        return " ".join((repo / name).read_text(encoding="utf-8").split())

    architecture, refresh = flat("docs/ARCHITECTURE.md"), flat("docs/sources-and-refresh.md")
    idle, interval, count = (SERVER_KEEPALIVES[f"tcp_keepalives_{key}"]
                             for key in ("idle", "interval", "count"))
    assert f"retries every `min(interval, {LEADER_RETRY_SECONDS:g} s)`" in architecture
    assert f"tries again every {LEADER_RETRY_SECONDS:g} seconds" in refresh
    assert f"up to {REFRESHER_STOP_SECONDS:g} s, `REFRESHER_STOP_SECONDS`" in architecture
    assert (f"{idle} s idle, {count} probes {interval} s apart): the server ends it, freeing "
            f"the lock, within about {idle + interval * count} s") in architecture
    assert f"within about {idle + interval * count} s" in refresh
    default = RefreshSettings().in_serve
    assert "`refresh.in_serve` is true (the default" in architecture and default
    assert f"in_serve = {str(default).lower()}" in flat("README.md")
