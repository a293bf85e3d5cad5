"""Community reports never carry a hidden row's words: a property test on PostgreSQL with
real row-level security policies, through every tool and mode that shows graph text.

Every member of the community has hundreds of visible chunks (more than any per-member
sample), and the rows only one caller may read sit anywhere among them. The words of those
rows (a codeword, and a person named nowhere else) must appear in no report text, title,
entity list or relationship line shown to a caller who cannot read them, while a caller who
can read every row sees the stored report with them (so the property is not vacuous).

The docgraph catalog (graph, reports, their recorded row sources) is the embedded SQLite
file or a PostgreSQL database of its own: the protection must hold on both.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.governance import (
    Caller,
    Governance,
    RoleAssignment,
    SqlRowAuthorizer,
    StaticEntitlements,
)
from docgraph.serve.tools import DocgraphTools
from tests.governance_helpers import add_row_documents, create_rls_tickets
from tests.pg import pgvector_server, postgres_db, postgres_server  # noqa: F401  (fixtures)

SECRET_WORDS = ("Zephyrquartz", "Quillon")
FILLER = "Nordhaven Logistics shipped pallets with Castellan Freight through dock {i}."
SECRET = ("Nordhaven Logistics, Castellan Freight and Quillon Vance agreed on the "
          "Zephyrquartz codeword for the merger.")


@pytest.fixture
def rls_tickets(postgres_db):  # noqa: F811
    engine = sa.create_engine(postgres_db, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:  # alice reads her rows, bob his, carol every row
        create_rls_tickets(conn, "owner = current_user OR current_user = 'carol'")
    authorizer = SqlRowAuthorizer({"crm": postgres_db}, identity="set_role")
    yield engine, authorizer
    for pool in authorizer._engines.values():
        pool.dispose()
    engine.dispose()


@pytest.fixture(params=["embedded", "postgres"])
def catalog_graph(request, make_graph, embedder) -> Iterator[Callable[[str], DocGraph]]:
    """Open a DocGraph (graph enabled) whose catalog is a SQLite file or a fresh
    PostgreSQL database (one per call)."""
    if request.param == "embedded":
        yield make_graph
        return
    server = request.getfixturevalue("pgvector_server")
    opened: list[tuple[str, DocGraph]] = []

    def make(name: str) -> DocGraph:
        database = f"t_{uuid.uuid4().hex[:12]}"
        url = server.create_database(database)
        graph = DocGraph(load_settings(store={"backend": "postgres", "url": url}), embedder)
        opened.append((database, graph))
        return graph

    yield make
    for database, graph in opened:
        graph.close()
        server.drop_database(database)


def _outputs(tools: DocgraphTools, caller: Caller) -> str:
    """Everything the caller is shown by the tools and listings that carry graph text."""
    governance = tools.governance
    shown = [
        tools.call("explore_topics", caller, {}),
        tools.call("explore_topics", caller, {"query_text": "Zephyrquartz codeword merger"}),
        tools.call("search_documents", caller, {"query_text": "Nordhaven Castellan codeword",
                                                "mode": "global", "k": 10}),
        tools.call("search_documents", caller, {"query_text": "Quillon Vance merger",
                                                "k": 20}),
        tools.call("document_context", caller, {"query_text": "Nordhaven Logistics merger"}),
        tools.call("trace_connections", caller, {"query_text": "Nordhaven Logistics and "
                                                               "Quillon Vance"}),
        tools.call("search_entities", caller, {"query_text": "Quillon"}),
        tools.call("search_entities", caller, {"query_text": "Nordhaven Logistics"}),
        tools.call("lookup_knowledge", caller, {"query": "What codeword did Quillon Vance "
                                                         "agree on?"}),
        [c.title + " " + " ".join(c.members) for c in governance.communities(caller)],
        [e.name for e in governance.entities(caller, limit=200)],
        [n.entity.name for n in governance.neighbors(caller, "Nordhaven Logistics", limit=50)],
    ]
    for part in shown:  # the caller's own words echoed back are not a leak
        if isinstance(part, dict):
            for key in ("query_text", "effective_query", "query", "unmatched_entities"):
                part.pop(key, None)
    return json.dumps(shown, ensure_ascii=False)


@settings(max_examples=4, phases=[Phase.generate], deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(fillers=st.integers(min_value=205, max_value=230),
       secrets=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=2))
def test_no_report_shows_a_hidden_rows_words(rls_tickets, catalog_graph, fillers, secrets):
    engine, authorizer = rls_tickets
    rows: dict[str, tuple[str, str]] = {
        str(i): ("alice", FILLER.format(i=i)) for i in range(1, fillers + 1)}
    for fraction in secrets:  # hidden rows anywhere in the id (and so link) order
        position = 1 + int(fraction * (fillers - 1))
        rows[str(position)] = ("bob", SECRET)
    with engine.begin() as conn:
        conn.exec_driver_sql("TRUNCATE tickets")
        conn.execute(sa.text("INSERT INTO tickets VALUES (:id, :owner, :body)"),
                     [{"id": int(k), "owner": o, "body": b} for k, (o, b) in rows.items()])
    graph = catalog_graph(f"reports-{fillers}-{len(secrets)}.db")
    add_row_documents(graph, "support", "tickets", {k: b for k, (_, b) in rows.items()},
                      source="crm", column="body")
    assert graph.graph_store.communities(["support"]), "the corpus must form a community"
    users = ("alice", "bob", "carol")
    tools = DocgraphTools(Governance(
        graph, StaticEntitlements([RoleAssignment(u, "agent", "support") for u in users]),
        authorizer))

    alice = _outputs(tools, Caller("alice"))
    for word in SECRET_WORDS:
        assert word not in alice, f"{word!r} of a row alice may not read was shown to her"
    assert "Nordhaven" in alice  # she still gets the graph text she may see

    carol = tools.call("explore_topics", Caller("carol"), {})
    assert any("Zephyrquartz" in r["text"] for r in carol["reports"]), \
        "the stored report must draw on the hidden row, or this test proves nothing"
