"""A real PostgreSQL row source (row-level security) behind a served index: what a caller
learns when it is down, and what a read by id costs in it.

- **Down** (issue 34): the server's PostgreSQL row database is stopped mid-test. Row
  documents fail closed (left out) as before, and now every answer that searched says which
  row-level source could not be checked (``unavailable_row_sources``): through the Python
  API, the JSON API and an MCP tool result; a caller whose namespaces hold no row source of
  that database is told nothing about it; ``/readyz`` names the database (degraded, still
  200). Once it is back the same search has the rows and no note.
- **Timing** (issue 34): reading a row id that does not exist runs the same statements in
  the row database as reading one that row-level security hides, so "not found" costs the
  same (counted with SQLAlchemy's cursor events on the authorizer's own engine, not timed).

The row database is a PostgreSQL of this module's own (stopping the session's shared one
would break other tests); the index is the embedded file.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from docgraph.errors import NotFound
from docgraph.governance import (
    Caller,
    Governance,
    RoleAssignment,
    SqlRowAuthorizer,
    StaticEntitlements,
)
from docgraph.serve.auth import BearerTokens
from docgraph.serve.http import create_app
from docgraph.serve.tools import DocgraphTools
from tests.governance_helpers import add_row_documents, create_rls_tickets
from tests.helpers import write_files
from tests.pg import PostgresServer, running_postgres_server
from tests.serve.test_http_server import Running, mcp_calls
from tests.serve.test_mcp_tools import open_isolated_graph

pytestmark = pytest.mark.postgres

ROWS = {"1": ("alice", "Ticket 1: the Nordhaven gateway stopped with E-417."),
        "2": ("bob", "Ticket 2: Nordhaven dock invoice dispute."),
        "3": ("alice", "Ticket 3: Nordhaven recall escalation.")}
QUERY = "Nordhaven gateway ticket"
ASSIGNMENTS = [RoleAssignment("alice", "agent", "support"),
               RoleAssignment("carol", "agent", "engineering")]


@pytest.fixture(scope="module")
def crm_server() -> Iterator[PostgresServer]:
    """A PostgreSQL of this module's own: the tests stop and start it."""
    yield from running_postgres_server()


@pytest.fixture(scope="module")
def served(crm_server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, Any]]:
    """The ``tickets`` table under row-level security (alice owns 1 and 3, bob 2) indexed
    as row documents of ``support`` beside a file, a file in ``engineering``, and the
    index served with a token for alice (support) and carol (engineering only)."""
    url = crm_server.create_database("crm")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        create_rls_tickets(conn, "owner = current_user")
        conn.execute(sa.text("INSERT INTO tickets VALUES (:id, :owner, :body)"),
                     [{"id": int(k), "owner": o, "body": b} for k, (o, b) in ROWS.items()])
    engine.dispose()
    root = tmp_path_factory.mktemp("row-database")
    graph = open_isolated_graph(root / "index.db")
    graph.index(write_files(root / "handbook", {"gateway.md": (
        "# Gateway\n\nA Nordhaven gateway ticket is escalated after one hour.\n")}),
        namespace="support")
    graph.index(write_files(root / "eng", {"fw.md": (
        "# Firmware\n\nThe Nordhaven gateway firmware ticket queue.\n")}),
        namespace="engineering")
    add_row_documents(graph, "support", "tickets", {k: b for k, (_, b) in ROWS.items()})
    authorizer = SqlRowAuthorizer({"crm": url}, identity="set_role")
    tools = DocgraphTools(Governance(graph, StaticEntitlements(ASSIGNMENTS), authorizer))
    tokens = BearerTokens(graph.token_store)
    issued = {"alice": tokens.add("alice"), "carol": tokens.add("carol")}
    try:
        with Running(create_app(tools, tokens)) as running:
            yield {"url": running.url, "tokens": issued, "tools": tools,
                   "authorizer": authorizer}
    finally:
        authorizer_engines(authorizer)
        graph.close()


def authorizer_engines(authorizer: SqlRowAuthorizer) -> None:
    """Close the authorizer's pooled connections (before the server stops or halts)."""
    for engine in authorizer._engines.values():
        engine.dispose()


def api(served: dict[str, Any], user: str, tool: str, arguments: dict[str, Any]
        ) -> dict[str, Any]:
    answer = httpx.post(f"{served['url']}/api/v1/{tool}", json=arguments, timeout=60,
                        headers={"Authorization": f"Bearer {served['tokens'][user]}"})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def row_ids(payload: dict[str, Any]) -> set[str]:
    return {h["document"] for h in payload["results"] if "tickets" in h["document"]}


def test_a_missing_row_id_runs_the_same_row_statements_as_a_hidden_one(served):
    tools: DocgraphTools = served["tools"]
    authorizer: SqlRowAuthorizer = served["authorizer"]
    statements: list[tuple[str, int]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
               executemany: bool) -> None:
        statements.append((statement, len(parameters or ())))

    engine = authorizer._engine("crm")
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        per_id: dict[str, list[tuple[str, int]]] = {}
        for item_id in ("public.tickets.body/1",  # alice's: read
                        "public.tickets.body/2",  # bob's: hidden by row-level security
                        "public.tickets.body/999"):  # no such row, never indexed
            statements.clear()
            with contextlib.suppress(NotFound):
                tools.call("read_document", Caller("alice"), {"id": item_id})
            per_id[item_id] = list(statements)
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    hidden, missing = per_id["public.tickets.body/2"], per_id["public.tickets.body/999"]
    assert any("tickets" in s for s, _ in hidden)  # the row check ran
    assert hidden == missing  # ... and the same for an id that names nothing
    assert per_id["public.tickets.body/1"] == hidden  # and for one the caller reads
    answers = []
    for item_id in ("public.tickets.body/2", "public.tickets.body/999"):
        with pytest.raises(NotFound) as caught:
            tools.call("read_document", Caller("alice"), {"id": item_id})
        answers.append(str(caught.value).replace(item_id, "<id>"))
    assert answers[0] == answers[1]


def test_a_stopped_row_database_is_named_in_answers_and_readiness(served, crm_server):
    tools: DocgraphTools = served["tools"]
    up = api(served, "alice", "search_documents", {"query_text": QUERY, "k": 10})
    assert row_ids(up) == {"public.tickets.body/1", "public.tickets.body/3"}
    assert "unavailable_row_sources" not in up

    authorizer_engines(served["authorizer"])
    crm_server.halt()
    try:
        down = api(served, "alice", "search_documents", {"query_text": QUERY, "k": 10})
        assert row_ids(down) == set() and down["results"]  # fail closed; the file still
        assert down["unavailable_row_sources"] == ["crm"]
        assert "crm" in down["unavailable_note"]
        lookup = api(served, "alice", "lookup_knowledge", {"query": QUERY})
        assert lookup["unavailable_row_sources"] == ["crm"]
        assert api(served, "alice", "search", {"query": QUERY})["unavailable_row_sources"] \
            == ["crm"]
        context = api(served, "alice", "document_context", {"query_text": QUERY})
        assert context["unavailable_row_sources"] == ["crm"]
        assert tools.governance.retrieve(Caller("alice"), QUERY).unavailable_row_sources \
            == ("crm",)
        _, results = mcp_calls(served["url"], served["tokens"]["alice"],
                               [("search_documents", {"query_text": QUERY})])
        assert results[0].structured_content["unavailable_row_sources"] == ["crm"]
        # carol's namespaces hold no source of that database: nothing is said about it
        carol = api(served, "carol", "search_documents", {"query_text": QUERY, "k": 10})
        assert carol["results"] and "unavailable_row_sources" not in carol
        assert "crm" not in str(carol)

        ready = httpx.get(served["url"] + "/readyz", timeout=30)
        assert ready.status_code == 200
        assert ready.json()["status"] == "degraded"
        assert ready.json()["components"]["row_databases"]["databases"] == {
            "crm": "unavailable"}
    finally:
        crm_server.resume()
    back = api(served, "alice", "search_documents", {"query_text": QUERY, "k": 10})
    assert row_ids(back) == {"public.tickets.body/1", "public.tickets.body/3"}
    assert "unavailable_row_sources" not in back
    deadline = time.monotonic() + 10  # a readiness result is reused for a second
    while httpx.get(served["url"] + "/readyz", timeout=30).json()["status"] != "ready":
        assert time.monotonic() < deadline, "readiness did not see the row database back"
        time.sleep(0.2)
