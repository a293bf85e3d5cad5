"""Failover of a real ``docgraph serve`` configured with a primary and its streaming replica.

The store's URL lists both servers with ``target_session_attrs=read-write`` (libpq picks
whichever accepts writes) and ``[store] read_urls`` the replica. Eight HTTP clients search,
and eight MCP clients (the SDK's streamable-HTTP client, each a user of its own) call
``lookup_knowledge`` and ``search_documents``, while the primary crashes (``pg_ctl stop -m
immediate``) and the standby is promoted (``pg_ctl promote``); one cluster, one server and
one failover for both kinds of client. What must hold, without restarting the server:
every answer is a 200, or a 503 (for MCP an error saying the store is unavailable) that
names no database address; every client is answered again after the promotion, an MCP
client in its session or a new one; every request acknowledged, before or after, has its
audit record on the promoted server (the database commits synchronously to the standby: an
acknowledged write is on it before the answer); a document only one MCP user may read,
indexed before the failover, is found by that user after it and never shown to anyone
else; one indexed after it is found too; the refresh leadership moves to the new primary at
the next try; and once the server stops, nothing it started is left: no process, no
database session.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import httpx2
import psutil
import psycopg
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.serve.auth import BearerTokens
from docgraph.store.postgres.leader import PostgresLeaderLock
from tests.deployment import Deployment
from tests.helpers import write_files
from tests.pg import PostgresServer
from tests.pg_replication import StandbyServer, replicated_pair, wait_replayed

pytestmark = pytest.mark.postgres

CLIENTS = 8
#: The MCP clients' users (one each); only the first may read the planted document.
AGENTS = [f"agent{i}" for i in range(CLIENTS)]
#: In the planted document's text only (the queries ask for it by its title, which a
#: lookup's answer repeats).
SECRET_WORD = "Marrowcombe"
SECRET = (f'---\naccess: ["user:{AGENTS[0]}"]\n---\n# Quillfeather escalation\n\n'
          f"The Tern T3 E-417 recall list is kept by {SECRET_WORD}, for agent0 only.\n")
POLICY = "assignments:\n" + "".join(
    f"  - {{user: {user}, role: eng, domain: engineering}}\n" for user in ["alice", *AGENTS])
MCP_CALLS = (("lookup_knowledge", "query", "Which firmware fixes E-417?"),
             ("search_documents", "query_text", "Which firmware fixes E-417?"),
             ("lookup_knowledge", "query", "Quillfeather escalation recall list"),
             ("search_documents", "query_text", "Quillfeather escalation recall list"))
AFTER_FAILOVER = 3  # answers each client must get after the promotion
DEADLINE_S = 120.0
CALL_TIMEOUT_S = 30.0


@pytest.fixture
def pair() -> Iterator[tuple[PostgresServer, StandbyServer]]:
    """A primary and standby of this test's own: the test crashes one and promotes the
    other."""
    yield from replicated_pair()


def _libpq(server: PostgresServer, database: str = "docgraph") -> str:
    return server.url(database).replace("+psycopg", "")


def _synchronous(primary: PostgresServer) -> None:
    """Commits of ``docgraph`` wait for the standby to flush them (the test servers run with
    ``synchronous_commit=off`` otherwise)."""
    with psycopg.connect(_libpq(primary, "postgres"), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("ALTER DATABASE docgraph SET synchronous_commit = on")
        deadline = time.monotonic() + 30
        while conn.execute("SELECT count(*) FROM pg_stat_replication"
                           " WHERE sync_state = 'sync'").fetchone()[0] == 0:
            assert time.monotonic() < deadline, "the standby did not become synchronous"
            time.sleep(0.05)


def _sessions_left(server: PostgresServer) -> int:
    """Client sessions on ``docgraph`` other than this one, once they are gone (bounded:
    a backend ends just after its client closed the socket)."""
    with psycopg.connect(_libpq(server), autocommit=True) as conn:
        deadline = time.monotonic() + 10
        while True:
            (left,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'docgraph'"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()").fetchone()
            if left == 0 or time.monotonic() > deadline:
                return int(left)
            time.sleep(0.05)


class HttpClient(threading.Thread):
    """Searches until told the failover is done and answered enough times after it."""

    def __init__(self, base: str, token: str, failed_over: threading.Event) -> None:
        super().__init__(daemon=True)
        self.base, self.token, self.failed_over = base, token, failed_over
        self.acknowledged: list[str] = []  # request ids answered 200
        self.refused: list[httpx.Response] = []
        self.after = 0
        self.hits_after = 0
        self.leaked = False
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        try:
            with httpx.Client(timeout=30) as http:
                while self.after < AFTER_FAILOVER and time.monotonic() < deadline:
                    done = self.failed_over.is_set()
                    answer = http.post(self.base + "/api/v1/search_documents",
                                       json={"query_text": "E-417 firmware"},
                                       headers={"Authorization": f"Bearer {self.token}"})
                    if answer.status_code == 200:
                        self.acknowledged.append(answer.headers["x-request-id"])
                        self.leaked |= SECRET_WORD in answer.text  # alice may not read it
                        if done:
                            self.after += 1
                            self.hits_after += bool(answer.json()["results"])
                    else:
                        self.refused.append(answer)
                        time.sleep(0.05)  # a client backing off
        except BaseException as exc:  # reported by the test
            self.error = exc


def query_hash(query: str) -> str:
    """What the audit log keeps of a query (``AuditRecord.hash_query``)."""
    return hashlib.sha256(query.encode("utf-8")).hexdigest()


class McpLoad:
    """What the eight MCP clients saw, per user."""

    def __init__(self) -> None:
        self.acknowledged: dict[str, list[str]] = {u: [] for u in AGENTS}  # query hashes
        self.after = dict.fromkeys(AGENTS, 0)
        self.sessions = dict.fromkeys(AGENTS, 0)  # initialized, the first one included
        self.refused: list[str] = []  # the texts of tool errors
        self.broken: list[str] = []  # sessions that ended in an exception
        self.seen = dict.fromkeys(AGENTS, False)  # whether the planted document was shown
        self.seen_after = False  # ... to its reader after the promotion
        self.done = False

    def satisfied(self, user: str) -> bool:
        """Whether ``user`` had its answers after the failover (the reader of the planted
        document: one of them showing it)."""
        return self.after[user] >= AFTER_FAILOVER and (user != AGENTS[0] or self.seen_after)


async def mcp_client(base: str, user: str, token: str, failed_over: threading.Event,
                     load: McpLoad) -> None:
    """One agent: calls lookup_knowledge and search_documents in its MCP session (each
    query made unique, so its audit record can be found) until it had its answers after the
    failover; a session that breaks is initialized anew, the server is never restarted."""
    deadline = time.monotonic() + DEADLINE_S
    turn = 0
    while not load.satisfied(user) and time.monotonic() < deadline:
        load.sessions[user] += 1
        try:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                          timeout=CALL_TIMEOUT_S) as http, \
                    Client(streamable_http_client(base + "/mcp", http_client=http)) as client:
                while not load.satisfied(user) and time.monotonic() < deadline:
                    done = failed_over.is_set()
                    tool, argument, text = MCP_CALLS[turn % len(MCP_CALLS)]
                    query = f"{text} ({user} call {turn})"
                    turn += 1
                    try:
                        with anyio.fail_after(CALL_TIMEOUT_S):
                            result = await client.call_tool(tool, {argument: query})
                    except MCPError as refused:  # the request refused, the session kept
                        load.refused.append(str(refused))
                        await anyio.sleep(0.05)  # a client backing off
                        continue
                    shown = "".join(getattr(c, "text", "") for c in result.content)
                    if result.is_error:
                        load.refused.append(shown)
                        await anyio.sleep(0.05)
                        continue
                    load.acknowledged[user].append(query_hash(query))
                    load.seen[user] |= SECRET_WORD in shown
                    load.seen_after |= done and SECRET_WORD in shown and user == AGENTS[0]
                    load.after[user] += done
        except Exception as exc:  # the session broke: a new one
            load.broken.append(f"{user}: " + "; ".join(
                f"{type(e).__name__}: {e}" for e in _leaves(exc)))
            await anyio.sleep(0.05)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions in ``exc``, a task group's included."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def run_mcp_clients(base: str, tokens: dict[str, str], failed_over: threading.Event,
                    load: McpLoad) -> threading.Thread:
    """The eight MCP clients, concurrent in one event loop on a thread of their own."""
    async def main() -> None:
        async with anyio.create_task_group() as group:
            for user in AGENTS:
                group.start_soon(mcp_client, base, user, tokens[user], failed_over, load)
        load.done = True

    thread = threading.Thread(target=anyio.run, args=(main,), daemon=True)
    thread.start()
    return thread


def test_a_failover_under_eight_clients_loses_no_acknowledged_request(pair, tmp_path: Path):
    primary, standby = pair
    primary.create_database("docgraph")
    _synchronous(primary)
    both = (f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
            "/docgraph?target_session_attrs=read-write")
    store = (f'[store]\nbackend = "postgres"\nurl = "{both}"\n'
             f'read_urls = ["{_libpq(standby)}"]\n')
    deployment = Deployment(tmp_path, store, POLICY, "[refresh]\nin_serve = false\n")
    leader = PostgresLeaderLock(both, identity="leader@test")
    # an operator's process on the same settings: it builds before and after the failover
    operator = DocGraph(load_settings(deployment.config))
    try:
        operator.index(write_files(tmp_path / "eng", {
            "t3.md": "# Tern T3\n\nFirmware 2.4.1 fixes error E-417 on the Tern T3.\n",
            "escalation.md": SECRET}), namespace="engineering")
        issue = BearerTokens(operator.token_store).add
        token = issue("alice")
        agent_tokens = {user: issue(user) for user in AGENTS}
        wait_replayed(primary, standby)
        process, base = deployment.serve_process()
        assert leader.try_acquire()

        failed_over = threading.Event()
        clients = [HttpClient(base, token, failed_over) for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        mcp = McpLoad()
        mcp_thread = run_mcp_clients(base, agent_tokens, failed_over, mcp)
        deadline = time.monotonic() + 60
        while (min(len(c.acknowledged) for c in clients) < 2  # all sixteen under way
               or min(len(a) for a in mcp.acknowledged.values()) < 2):
            assert time.monotonic() < deadline and all(c.is_alive() for c in clients)
            assert mcp_thread.is_alive(), mcp.broken
            time.sleep(0.02)
        primary._run("pg_ctl", "-D", str(primary.data), "-m", "immediate", "-w", "stop")
        standby.promote()
        failed_over.set()
        for client in clients:
            client.join(DEADLINE_S + 30)
        mcp_thread.join(DEADLINE_S + 30)

        assert [c.error for c in clients if c.error] == []
        assert not any(c.leaked for c in clients)
        # MCP: every agent answered after the promotion, in its session or a new one
        assert mcp.done and all(map(mcp.satisfied, AGENTS)), (mcp.after, mcp.broken)
        assert len(mcp.broken) == sum(mcp.sessions.values()) - CLIENTS
        # only the document's reader was shown it; to it, after the failover too (written
        # before it, the document was not lost)
        assert mcp.seen == {user: user == AGENTS[0] for user in AGENTS} and mcp.seen_after
        # a refusal says the store is unavailable, never where the databases are
        assert all("unavailable" in text for text in mcp.refused), mcp.refused
        for text in mcp.refused + mcp.broken:
            assert "127.0.0.1" not in text and "postgresql://" not in text, text
        assert all(c.after == AFTER_FAILOVER for c in clients), [c.after for c in clients]
        assert all(c.hits_after == AFTER_FAILOVER for c in clients)  # the document survived
        refused = [r for c in clients for r in c.refused]
        assert {r.status_code for r in refused} <= {503}, [r.text for r in refused]
        for answer in refused:  # nothing says where the databases are
            assert "127.0.0.1" not in answer.text and "postgresql://" not in answer.text

        acknowledged = {rid for c in clients for rid in c.acknowledged}
        with psycopg.connect(_libpq(standby), autocommit=True) as conn:
            recorded = {str(r[0]) for r in conn.execute(
                "SELECT payload->>'request_id' FROM audit_log").fetchall()}
            connections = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = 'docgraph'"
                " AND backend_type = 'client backend'").fetchone()[0]
            agents_recorded = {str(r[0]) for r in conn.execute(
                "SELECT payload->>'query_hash' FROM audit_log WHERE outcome = 'ok'"
                " AND user_id LIKE 'agent%'").fetchall()}
        assert acknowledged - recorded == set()  # every acknowledged request is kept
        assert len(acknowledged) > CLIENTS * (2 + AFTER_FAILOVER) - 1
        agents_acknowledged = {h for hashes in mcp.acknowledged.values() for h in hashes}
        assert agents_acknowledged - agents_recorded == set()  # MCP calls too
        # one connection per worker thread and role at most, nothing piling up on retries
        assert connections < 45, connections

        # the leadership moves: the lock's session died with the old primary
        assert leader.try_acquire() and leader.holder() == "leader@test"
        with psycopg.connect(_libpq(standby), autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                                " AND granted").fetchone()[0] == 1
        leader.release()  # else the index below is refused: another process leads

        # the operator's process writes to the promoted server without reopening; the
        # running server reads it
        operator.index(write_files(tmp_path / "eng2", {
            "k9.md": "# Kestrel\n\nKestrel K9 gearbox torque is 412 Nm.\n"}),
            namespace="engineering")
        found = httpx.post(base + "/api/v1/search_documents",
                           json={"query_text": "Kestrel gearbox torque"},
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert found.status_code == 200 and "Kestrel" in found.text
        assert process.poll() is None  # never restarted
        assert "Traceback" not in deployment.log_of(process)

        # once stopped, the server leaves nothing behind: no process, no database session
        started = psutil.Process(process.pid).children(recursive=True)
        operator.close()
        leader.close()
        deployment.stop()
        assert psutil.wait_procs(started, timeout=10)[1] == []
        assert _sessions_left(standby) == 0
    finally:
        operator.close()
        leader.close()
        deployment.stop()
