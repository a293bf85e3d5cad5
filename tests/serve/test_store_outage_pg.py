"""A real ``docgraph serve`` on PostgreSQL while PostgreSQL stops and comes back.

What must hold while the store is down: every request that needs it gets 503 with
``Retry-After`` in its route's error shape (the JSON API's ``{"error": ...}``, a JSON-RPC
error on ``/mcp``, the console's error page), whatever its token; no database address in
the answer; ``/healthz`` stays 200 and ``/readyz`` answers 503 naming the store; the log has
one warning for the whole outage and no traceback. After PostgreSQL restarts, the same
requests succeed without restarting the server, ``/readyz`` is 200 again, and the log says
once that the store is back.

A store lost between the token check and the tool (the tokens elsewhere, here) is the same
503 on the JSON API, and on ``/mcp``, where the SDK's session already answers, a tool error
that says the store is unavailable (an agent retries) without the database's address.

The server gets a PostgreSQL of its own (stopping the session's shared one would break the
other tests).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from docgraph.serve.auth import BearerTokens
from docgraph.serve.console.sessions import SESSION_COOKIE
from docgraph.serve.http import create_app
from tests.deployment import Deployment, postgres_store
from tests.helpers import write_files
from tests.pg import PostgresServer, running_pgvector_server
from tests.serve.test_http_server import Running, mcp_calls
from tests.serve.test_mcp_tools import build_corpus, error_text, make_tools, open_isolated_graph

pytestmark = pytest.mark.postgres

POLICY = "assignments:\n  - {user: alice, role: eng, domain: engineering}\n"
DOCS = {"t3.md": "# Tern T3\n\nFirmware 2.4.1 fixes error E-417 on the Tern T3 gateway.\n"}
WARNING = "the index store is unavailable"
BACK = "the index store is available again"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "outage-test", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL with pgvector that this test alone stops and starts."""
    yield from running_pgvector_server()


@pytest.fixture
def deployment(own_postgres: PostgresServer, tmp_path: Path) -> Iterator[Deployment]:
    url = own_postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    made = Deployment(tmp_path, postgres_store(url), POLICY, "[refresh]\nin_serve = false\n")
    try:
        yield made
    finally:
        made.stop()


def search(base: str, token: str) -> httpx.Response:
    return httpx.post(base + "/api/v1/search_documents", json={"query_text": "E-417"},
                      headers={"Authorization": f"Bearer {token}"}, timeout=30)


def assert_unavailable(response: httpx.Response, address: str) -> None:
    """A 503 with Retry-After that does not reveal where the database is."""
    assert response.status_code == 503, (response.status_code, response.text)
    assert int(response.headers["retry-after"]) > 0
    assert address not in response.text and "postgresql://" not in response.text


def test_a_stopped_store_answers_503_logs_once_and_recovers(own_postgres: PostgresServer,
                                                            deployment: Deployment,
                                                            tmp_path: Path):
    deployment.run("index", str(write_files(tmp_path / "eng", DOCS)),
                   "--namespace", "engineering")
    token = deployment.run("token", "add", "alice").strip()
    process, base = deployment.serve_process()
    assert search(base, token).status_code == 200
    assert httpx.get(base + "/readyz", timeout=30).status_code == 200
    address = f"127.0.0.1:{own_postgres.port}"

    own_postgres.halt()
    for _ in range(10):  # a client retrying, a load balancer probing
        for attempt in (token, token + "x"):  # a valid and a bad token alike
            answer = search(base, attempt)
            assert_unavailable(answer, address)
            assert answer.headers["content-type"].startswith("application/json")
            assert set(answer.json()) == {"error"} and "unavailable" in answer.json()["error"]

    mcp = httpx.post(base + "/mcp", json=INITIALIZE, timeout=30,
                     headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"})
    assert_unavailable(mcp, address)
    error = mcp.json()
    assert error["jsonrpc"] == "2.0" and error["id"] is None
    assert error["error"]["code"] == -32603 and "unavailable" in error["error"]["message"]

    # a console page of a signed-in browser (its session lives in the store)
    page = httpx.get(base + "/console/status", cookies={SESSION_COOKIE: "s" * 43},
                     timeout=30)
    assert_unavailable(page, address)
    assert page.headers["content-type"].startswith("text/html")
    assert "unavailable" in page.text and "Traceback" not in page.text

    assert httpx.get(base + "/healthz", timeout=30).status_code == 200
    assert httpx.get(base + "/healthz", headers={"Authorization": f"Bearer {token}"},
                     timeout=30).status_code == 200
    ready = httpx.get(base + "/readyz", timeout=30)
    assert_unavailable(ready, address)
    assert ready.json()["status"] == "not ready"
    assert "store" in ready.json()["failing"]
    assert ready.json()["components"]["store"]["status"] == "unavailable"

    time.sleep(0.3)  # the log is written by another process
    during = deployment.log_of(process)
    assert during.count(WARNING) == 1, during[-3000:]
    assert "Traceback" not in during and "Internal Server Error" not in during

    own_postgres.resume()
    deadline = time.monotonic() + 30
    while (answer := search(base, token)).status_code != 200:
        assert answer.status_code == 503, answer.text
        assert time.monotonic() < deadline, "the server did not recover"
        time.sleep(0.1)
    assert answer.json()["results"], answer.json()
    for _ in range(5):  # every worker thread's connection works again, not only one
        assert search(base, token).status_code == 200
    assert search(base, token + "x").status_code == 401
    time.sleep(1.1)  # past the readiness cache
    ready = httpx.get(base + "/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready" and ready.json()["failing"] == []

    time.sleep(0.3)
    after = deployment.log_of(process)
    assert after.count(WARNING) == 1, after[-3000:]
    assert after.count(BACK) == 1, after[-3000:]
    assert "Traceback" not in after


def test_a_store_lost_during_a_call_is_a_503_and_an_mcp_tool_error(own_postgres: PostgresServer,
                                                                  tmp_path: Path):
    url = own_postgres.create_database("lost_mid_call")
    graph = build_corpus(open_isolated_graph(tmp_path / "pg", {"backend": "postgres",
                                                                 "url": url}),
                         tmp_path, rows=False)
    token_graph = open_isolated_graph(tmp_path / "tokens.db")  # tokens readable throughout
    tokens = BearerTokens(token_graph.token_store)
    token = tokens.add("alice")
    address = f"127.0.0.1:{own_postgres.port}"
    calls = [("search_documents", {"query_text": "E-417", "k": 3})]
    try:
        with Running(create_app(make_tools(graph), tokens)) as running:
            assert search(running.url, token).status_code == 200
            own_postgres.halt()
            answer = search(running.url, token)
            assert_unavailable(answer, address)
            assert "unavailable" in answer.json()["error"]
            [result] = mcp_calls(running.url, token, calls)[1]
            message = error_text(result)
            assert "unavailable" in message and address not in message, message
            own_postgres.resume()
            deadline = time.monotonic() + 30
            while search(running.url, token).status_code != 200:
                assert time.monotonic() < deadline, "the server did not recover"
                time.sleep(0.1)
            [result] = mcp_calls(running.url, token, calls)[1]
            assert not result.is_error
    finally:
        graph.close()
        token_graph.close()
