"""Failover of a real ``docgraph serve`` configured with a primary and its streaming replica.

The store's URL lists both servers with ``target_session_attrs=read-write`` (libpq picks
whichever accepts writes) and ``[store] read_urls`` the replica. Eight HTTP clients search
while the primary crashes (``pg_ctl stop -m immediate``) and the standby is promoted
(``pg_ctl promote``). What must hold, without restarting the server: every answer is a 200 or
a 503 that names no database address; every client is answered 200 again after the
promotion; every request acknowledged with a 200, before or after, has its audit record on
the promoted server (the database commits synchronously to the standby: an acknowledged
write is on it before the answer); a document indexed before the failover is found, one
indexed after it too; and the refresh leadership moves to the new primary at the next try.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.serve.auth import BearerTokens
from docgraph.store.postgres.leader import PostgresLeaderLock
from tests.deployment import Deployment
from tests.helpers import write_files
from tests.pg import PostgresServer
from tests.pg_replication import StandbyServer, replicated_pair, wait_replayed

pytestmark = pytest.mark.postgres

POLICY = "assignments:\n  - {user: alice, role: eng, domain: engineering}\n"
CLIENTS = 8
AFTER_FAILOVER = 3  # answers each client must get after the promotion
DEADLINE_S = 120.0


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


class Client(threading.Thread):
    """Searches until told the failover is done and answered enough times after it."""

    def __init__(self, base: str, token: str, failed_over: threading.Event) -> None:
        super().__init__(daemon=True)
        self.base, self.token, self.failed_over = base, token, failed_over
        self.acknowledged: list[str] = []  # request ids answered 200
        self.refused: list[httpx.Response] = []
        self.after = 0
        self.hits_after = 0
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
                        if done:
                            self.after += 1
                            self.hits_after += bool(answer.json()["results"])
                    else:
                        self.refused.append(answer)
                        time.sleep(0.05)  # a client backing off
        except BaseException as exc:  # reported by the test
            self.error = exc


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
            "t3.md": "# Tern T3\n\nFirmware 2.4.1 fixes error E-417 on the Tern T3.\n"}),
            namespace="engineering")
        token = BearerTokens(operator.token_store).add("alice")
        wait_replayed(primary, standby)
        process, base = deployment.serve_process()
        assert leader.try_acquire()

        failed_over = threading.Event()
        clients = [Client(base, token, failed_over) for _ in range(CLIENTS)]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 60
        while min(len(c.acknowledged) for c in clients) < 2:  # all eight under way
            assert time.monotonic() < deadline and all(c.is_alive() for c in clients)
            time.sleep(0.02)
        primary._run("pg_ctl", "-D", str(primary.data), "-m", "immediate", "-w", "stop")
        standby.promote()
        failed_over.set()
        for client in clients:
            client.join(DEADLINE_S + 30)

        assert [c.error for c in clients if c.error] == []
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
        assert acknowledged - recorded == set()  # every acknowledged request is kept
        assert len(acknowledged) > CLIENTS * (2 + AFTER_FAILOVER) - 1
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
    finally:
        operator.close()
        leader.close()
        deployment.stop()
