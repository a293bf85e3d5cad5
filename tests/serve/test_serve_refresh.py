"""``docgraph serve`` refreshes the index it serves, and of several servers on one index
exactly one does: two real ``serve`` processes on the embedded file and on PostgreSQL.

What must hold: the first server leads and the second follows (both say so through
``index_status``, to a real MCP client too, with only the caller's namespaces); a
``docgraph index`` beside them is refused naming the leader, also after ``--wait``; when
the leader is SIGKILLed the follower leads within the bound and indexes a file changed
after the kill; a server stopped with SIGTERM or Ctrl-C (SIGINT) stops its loop first
("refresher stopped" in its log), leaving no process behind.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from docgraph import DocGraph
from docgraph.serve.auth import BearerTokens
from tests.backend_graphs import BACKEND_NAMES, fresh_database
from tests.deployment import Deployment, embedded_store, postgres_store
from tests.helpers import write_files
from tests.pg import PostgresServer, pgvector_server  # noqa: F401  (fixture)

HR = {"leave.md": "# Leave\n\nStaff get twenty weeks of parental leave.\n"}
OPS = {"runbook.md": "# Runbook\n\nError E-417 on the Kestrel K2 means the lidar is blocked.\n"}
NEW_FACT = "Quokka sabbaticals of six months start in May for every team."
POLICY = ("assignments:\n"
          "  - {user: alice, role: hr, domain: hr}\n"
          "  - {user: bob, role: ops, domain: ops}\n")
INTERVAL_S = 1.0  # refresh.interval_seconds: a follower retries as often
TAKEOVER_BOUND_S = 30.0  # retry interval + start of the first round, with room for a busy CI
DEADLINE_S = 90.0  # a bound on waiting, never an assertion of speed


@pytest.fixture(params=BACKEND_NAMES)
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    server: PostgresServer | None = None
    database = ""
    if request.param == "postgres":
        server = request.getfixturevalue("pgvector_server")
        database, url = fresh_database(server)
        store = postgres_store(url)
    else:
        store = embedded_store(tmp_path / "index.db")
    made = Deployment(tmp_path, store, POLICY,
                      f"[refresh]\ninterval_seconds = {INTERVAL_S}\n")
    try:
        yield made
    finally:
        made.stop()
        if server is not None:
            server.drop_database(database)


def _status(url: str, token: str) -> dict[str, Any]:
    answer = httpx.get(url + "/api/v1/index_status", timeout=30,
                       headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def _search(url: str, token: str, query: str) -> str:
    answer = httpx.post(url + "/api/v1/search_documents", timeout=60,
                        json={"query_text": query, "k": 3},
                        headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    return json.dumps(answer.json()["results"])


def _wait_for(what: str, condition: Callable[[], bool], alive: list[subprocess.Popen[bytes]],
              bound: float = DEADLINE_S) -> float:
    """Seconds until ``condition`` held; fails after ``bound`` or if a process died."""
    started = time.monotonic()
    while not condition():
        for process in alive:
            assert process.poll() is None, f"process {process.pid} exited while waiting for {what}"
        if time.monotonic() - started > bound:
            raise AssertionError(f"gave up after {bound:.0f}s waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - started


async def _mcp_index_status(url: str, token: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client:
        result = await client.call_tool("index_status", {})
    assert not result.is_error, result.content
    data: dict[str, Any] = json.loads(result.content[0].text)
    return data


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def _stops_cleanly(deployment: Deployment, process: subprocess.Popen[bytes],
                   how: signal.Signals) -> None:
    children = _children(process.pid)
    process.send_signal(how)
    process.wait(DEADLINE_S)
    assert process.returncode in (0, -how, 128 + how), process.returncode  # by the signal
    assert "refresher stopped" in deployment.log_of(process)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children), children


def test_two_servers_elect_one_refresher_and_the_other_takes_over(
        deployment: Deployment, tmp_path: Path) -> None:
    hr = write_files(tmp_path / "hr", HR)
    with DocGraph.open(config_file=deployment.config) as graph:
        graph.index(hr, "hr")
        graph.index(write_files(tmp_path / "ops", OPS), "ops")
        tokens = BearerTokens(graph.token_store)
        alice, bob = tokens.add("alice"), tokens.add("bob")
    host = socket.gethostname()

    first, first_url = deployment.serve_process()

    def built_by_first() -> bool:
        status = _status(first_url, bob)
        return bool(status["refresh"]["this_process_leads"]
                    and status["namespaces"][0]["last_outcome"] == "ok")

    _wait_for("the first server to lead and build", built_by_first, [first])
    second, second_url = deployment.serve_process()
    alive = [first, second]
    leader = f"{first.pid}@{host}"
    assert _status(first_url, alice)["refresh"] == {
        "leader": leader, "this_process_leads": True, "refresher_running": True,
        "interval_seconds": INTERVAL_S}
    assert _status(second_url, alice)["refresh"] == {
        "leader": leader, "this_process_leads": False, "refresher_running": True,
        "interval_seconds": INTERVAL_S}
    # To an MCP client: the leader, and the last build of the caller's namespaces only.
    seen = anyio.run(_mcp_index_status, second_url, bob)
    assert seen["refresh"]["leader"] == leader and not seen["refresh"]["this_process_leads"]
    assert [(n["namespace"], n["last_outcome"]) for n in seen["namespaces"]] == [("ops", "ok")]

    # A CLI build beside them is refused, naming the leader, and changes nothing.
    for wait in ("0", "1"):
        done = deployment.attempt("index", str(write_files(tmp_path / "new", OPS)),
                                  "-n", "new", "--wait", wait)
        assert done.returncode == 1, done.stderr[-2000:]
        assert f"led by {leader}" in " ".join(done.stderr.split())
    with DocGraph.open(config_file=deployment.config) as graph:
        assert graph.namespaces() == ["hr", "ops"]

    first.send_signal(signal.SIGKILL)
    first.wait()
    alive.remove(first)
    took = _wait_for("the second server to lead",
                     lambda: _status(second_url, alice)["refresh"]["this_process_leads"],
                     alive, TAKEOVER_BOUND_S)
    print(f"take-over after SIGKILL: {took:.2f}s")
    assert _status(second_url, bob)["refresh"]["leader"] == f"{second.pid}@{host}"
    (hr / "sabbatical.md").write_text(f"# Sabbatical\n\n{NEW_FACT}\n", encoding="utf-8")
    _wait_for("the new leader to index a changed file",
              lambda: "Quokka" in _search(second_url, alice, "Quokka sabbaticals"), alive)
    assert "Quokka" not in _search(second_url, bob, "Quokka sabbaticals")  # hr is alice's

    # Ctrl-C on one backend, SIGTERM on the other: both stop the loop before exiting.
    postgres = 'backend = "postgres"' in deployment.config.read_text()
    _stops_cleanly(deployment, second, signal.SIGINT if postgres else signal.SIGTERM)
    with DocGraph.open(config_file=deployment.config) as graph:
        assert graph.leadership.leader() is None
        assert graph.status().refresh_leader is None


@pytest.mark.parametrize("deployment", ["embedded"], indirect=True)  # a setting, not storage
def test_a_server_with_in_serve_off_does_not_refresh(deployment: Deployment,
                                                     tmp_path: Path) -> None:
    with DocGraph.open(config_file=deployment.config) as graph:
        graph.index(write_files(tmp_path / "hr", HR), "hr")
        token = BearerTokens(graph.token_store).add("alice")
    deployment.env["DOCGRAPH_REFRESH__IN_SERVE"] = "false"
    process, url = deployment.serve_process()
    time.sleep(3 * INTERVAL_S)  # several intervals in which it would have led and built
    assert _status(url, token)["refresh"] == {
        "leader": None, "this_process_leads": False, "refresher_running": False,
        "interval_seconds": INTERVAL_S}
    with DocGraph.open(config_file=deployment.config) as graph:
        # only the build of graph.index above (an index run is a build): the server built none
        assert len(graph.build_history.recent("hr")) == 1
        graph.index(tmp_path / "hr", "hr")  # and a CLI/API build is not refused
    process.terminate()
    process.wait(DEADLINE_S)
