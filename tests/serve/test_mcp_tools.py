"""The MCP tools, driven in-process with the SDK's own client: every tool, argument bounds,
denials, and different answers for callers with different rights.

The corpus helpers here are shared by the stdio and HTTP tests."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from docgraph import DocGraph
from docgraph.config import load_settings
from docgraph.errors import InvalidQuery
from docgraph.governance import (
    CallableRowAuthorizer,
    Caller,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from docgraph.serve.mcp import build_mcp_server, fixed_caller
from docgraph.serve.tool_args import decode_cursor, encode_cursor
from docgraph.serve.tools import TOOLS, DocgraphTools
from tests.backend_graphs import BACKEND_NAMES
from tests.governance_helpers import add_row_documents
from tests.helpers import CountingEmbedder, write_files
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.store_backends import BACKENDS, Backend

TOOL_NAMES = ["lookup_knowledge", "search_documents", "explore_topics", "trace_connections",
              "document_context", "search_entities", "list_documents", "index_status",
              "read_document", "search", "fetch"]

ENGINEERING = {
    "firmware.md": "# Tern T3 firmware 5.3.1\n\nFirmware 5.3.1 fixes error E-417 on the Tern T3 "
                   "fleet of Nordhaven Logistics. The fix changes the CAN bus watchdog.\n\n"
                   "## Rollout\n\nThe Roost gateway pushes firmware 5.3.1 to every Tern T3 "
                   "over TLS. Rollout for Nordhaven Logistics finished on 3 April.\n",
    "errors.md": "# Error codes\n\nE-417: CAN bus watchdog timeout on the Tern T3. Install "
                 "firmware 5.3.1.\n\nE-418: TLS certificate expired on the Roost gateway. "
                 "Renew the certificate.\n",
    "postmortem.md": "# Postmortem Rotterdam\n\nNordhaven Logistics lost its Rotterdam Tern T3 "
                     "fleet for two hours because of E-417. The Roost gateway kept running. "
                     "The Heron H7 fleet was unaffected.\n",
}
SUPPORT = {
    "sla.md": "# Service levels\n\nPlatinum customers such as Nordhaven Logistics get a 15 "
              "minute P1 response. Brightwell Grocers is a Gold customer with a 1 hour P1 "
              "response.\n",
    "faq.md": "# Tern T3 FAQ\n\nTo reboot a Tern T3, hold the power key for ten seconds. The "
              "Roost gateway reconnects the robot afterwards. Brightwell Grocers asked this "
              "twice.\n",
}
TICKETS = {
    "1": "Ticket 1: Nordhaven Logistics reports the Tern T3 fleet stopped with E-417.",
    "2": "Ticket 2: Brightwell Grocers asks about the Plover P2 dock invoice of 9,999 EUR.",
    "3": "Ticket 3: Castellan Pharma confidential escalation about the Heron H7 recall.",
    "4": "Ticket 4: Nordhaven Logistics thanks the team for restoring the Tern T3 fleet.",
}
ASSIGNMENTS = [
    RoleAssignment("alice", "eng", "engineering"),
    RoleAssignment("alice", "support", "support"),
    RoleAssignment("bob", "support", "support"),
    RoleAssignment("root", "admin", "*"),
]
ROW_RIGHTS = {"alice": {"1", "2", "3", "4"}, "bob": {"1", "4"}, "root": {"1", "2", "3", "4"}}
POLICY_YAML = "assignments:\n" + "".join(
    f"  - {{user: {a.user}, role: {a.role}, domain: {json.dumps(a.domain)}}}\n"
    for a in ASSIGNMENTS
)


def row_rights(caller: Caller, key: object, pks: Any) -> set[str]:
    """The ticket rows each test user may read."""
    return {pk for pk in pks if pk in ROW_RIGHTS.get(caller.user_id, set())}


def build_corpus(graph: DocGraph, root: Path, *, rows: bool = True) -> DocGraph:
    """Index the small two-namespace corpus (and the ticket rows) into ``graph``."""
    graph.index(write_files(root / "eng", ENGINEERING), namespace="engineering")
    graph.index(write_files(root / "sup", SUPPORT), namespace="support")
    if rows:
        add_row_documents(graph, "support", "tickets", TICKETS)
    return graph


def make_tools(graph: DocGraph) -> DocgraphTools:
    """Governed tools with the test entitlements and row rights."""
    return DocgraphTools(Governance(graph, StaticEntitlements(ASSIGNMENTS),
                                    CallableRowAuthorizer(row_rights)))


def payload(result: Any) -> dict[str, Any]:
    """The JSON result of a successful tool call (fails the test on a tool error)."""
    assert not result.is_error, result.content[0].text
    data: dict[str, Any] = json.loads(result.content[0].text)
    assert data == result.structured_content
    return data


def error_text(result: Any) -> str:
    """The message of a failed tool call (fails the test if the call succeeded)."""
    assert result.is_error, result.content[0].text[:200]
    text: str = result.content[0].text
    return text


def open_isolated_graph(path: Path, store: dict[str, object] | None = None) -> DocGraph:
    """A graph at ``path`` (or on the ``[store]`` settings ``store``, e.g. a backend's
    :meth:`~tests.store_backends.Backend.store_settings`) with the hashing embedder and default
    settings only (no docgraph.toml or DOCGRAPH_* variable of the machine is read)."""
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("DOCGRAPH_"):
                patch.delenv(key)
        patch.setenv("DOCGRAPH_CONFIG", str(path.parent / "absent-docgraph.toml"))
        settings = load_settings(store=store) if store else load_settings()
    if not store:
        settings.store.path = path
    return DocGraph(settings, CountingEmbedder())


@contextmanager
def backend_for(request: pytest.FixtureRequest, root: Path) -> Iterator[Backend]:
    """The backend named by ``request.param`` (``embedded`` or ``postgres``: a SQLite file in
    ``root`` or a fresh database on the session's PostgreSQL), released afterwards. Usable
    from a module-scoped fixture, so a module builds its corpus once per backend."""
    backend = BACKENDS[request.param](request, root)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(scope="module", params=BACKEND_NAMES)
def corpus_graph(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocGraph]:
    """One indexed corpus per backend shared by the tests of this module (they only read
    it): every test here runs on the embedded file and on PostgreSQL."""
    root = tmp_path_factory.mktemp("mcp-corpus")
    with backend_for(request, root) as backend:
        graph = build_corpus(open_isolated_graph(root / "index.db", backend.store_settings()),
                             root)
        yield graph
        graph.close()


@pytest.fixture
def tools(corpus_graph: DocGraph) -> DocgraphTools:
    return make_tools(corpus_graph)


def call_all(tools: DocgraphTools, caller: Caller,
             calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """Run ``calls`` through one in-process MCP session as ``caller``."""
    server = build_mcp_server(tools, fixed_caller(caller))
    results: list[Any] = []

    async def main() -> None:
        async with Client(server) as client:
            for name, args in calls:
                results.append(await client.call_tool(name, args))

    anyio.run(main)
    return results


def list_tools(tools: DocgraphTools) -> list[Any]:
    server = build_mcp_server(tools, fixed_caller(Caller("alice")))
    found: list[Any] = []

    async def main() -> None:
        async with Client(server) as client:
            found.extend((await client.list_tools()).tools)

    anyio.run(main)
    return found


# -- the tool list ------------------------------------------------------------------------------

def test_every_tool_has_bounded_arguments_and_no_namespace_argument(tools):
    listed = {t.name: t for t in list_tools(tools)}
    assert list(listed) == TOOL_NAMES
    for tool in listed.values():
        props = tool.input_schema.get("properties", {})
        assert not {"namespace", "namespaces", "domain", "role", "user"} & set(props)
        assert tool.annotations.read_only_hint is True
    search = listed["search_documents"].input_schema["properties"]
    assert search["k"]["minimum"] == 1 and search["k"]["maximum"] == 50
    assert search["query_text"]["maxLength"] == 2000
    assert set(search["mode"]["enum"]) == {"vector_first", "graph_first", "global"}
    budget = listed["document_context"].input_schema["properties"]["token_budget"]
    assert (budget["minimum"], budget["maximum"]) == (200, 16000)
    assert listed["list_documents"].input_schema["properties"]["limit"]["maximum"] == 200
    assert listed["lookup_knowledge"].input_schema["required"] == ["query"]
    assert "required" not in listed["explore_topics"].input_schema


def test_descriptions_carry_agent_guidance(tools):
    listed = {t.name: t.description for t in list_tools(tools)}
    for name in ("lookup_knowledge", "search_documents", "trace_connections",
                 "document_context", "search_entities", "explore_topics"):
        text = listed[name].lower()
        assert "one atomic" in text and "name the entities" in text
        assert "widen k" in text and "answer you expect" in text
    assert "graph_first" in listed["search_documents"] and "global" in listed["search_documents"]


# -- every tool --------------------------------------------------------------------------------

def test_every_tool_answers_from_real_capabilities(tools):
    calls: list[tuple[str, dict[str, Any]]] = [
        ("lookup_knowledge", {"query": "Which firmware fixes E-417?"}),
        ("search_documents", {"query_text": "firmware fix for E-417", "k": 4}),
        ("search_documents", {"query_text": "Nordhaven Logistics E-417", "k": 3,
                              "mode": "graph_first"}),
        ("explore_topics", {}),
        ("trace_connections", {"query_text": "How is Nordhaven Logistics connected to E-417?",
                               "k": 5}),
        ("document_context", {"query_text": "E-417 on the Tern T3", "token_budget": 800}),
        ("search_entities", {"query_text": "Tern", "k": 5}),
        ("list_documents", {"limit": 50}),
        ("index_status", {}),
    ]
    (lookup, search, graph_first, topics, trace, context, entities, documents,
     status) = [payload(r) for r in call_all(tools, Caller("alice"), calls)]

    assert lookup["evidence"] and lookup["relevance_level"] in ("PRECISE", "AMBIGUOUS", "WEAK",
                                                                "NONE", "precise", "ambiguous")
    first = lookup["evidence"][0]
    assert "#chunk-" in first["document_id"] and first["excerpt"]
    assert {"document_id", "source", "title", "section", "excerpt"} <= set(first)

    assert search["count"] == len(search["results"]) > 0
    hit = search["results"][0]
    assert {"score", "source", "section", "lane", "chunk_id"} <= set(hit)
    assert "E-417" in " ".join(r["text"] for r in search["results"])
    assert hit["lane"] in ("dense+bm25", "dense", "bm25", "structural", "entity_adjacent",
                           "graph", "cluster_adjacent", "ppr")  # the CLI's names for seeds
    assert hit["score_label"] == "composite"
    assert graph_first["mode"] == "graph_first" and graph_first["results"]

    assert topics["effective_query"] and topics["reports"]
    assert topics["reports"][0]["report_id"].startswith("community://")
    assert topics["answer"] is None and "no chat model" in topics["answer_note"]

    assert {"E-417", "Nordhaven Logistics"} <= set(trace["query_entities"])
    assert trace["results"] and all("paths" in r for r in trace["results"])
    assert any(r["paths"] for r in trace["results"])

    assert set(context["sections"]) == {"Entities", "Relationships", "Community Reports",
                                        "Source Text"}
    assert context["source_chunks"] and sum(context["tokens_used"].values()) <= 800

    names = [e["name"] for e in entities["entities"]]
    assert any("Tern" in n for n in names)
    assert all(e["chunks"] and e["chunks"][0]["snippet"] for e in entities["entities"])

    assert documents["count"] == 9 and documents["next_cursor"] is None  # 5 files + 4 rows
    assert {d["namespace"] for d in documents["documents"]} == {"engineering", "support"}
    assert all(d["content_hash"] and d["change_token"] for d in documents["documents"])

    assert [n["namespace"] for n in status["namespaces"]] == ["engineering", "support"]
    assert status["embedding_model"]["name"] == "hashing-256"
    assert status["namespaces"][0]["documents"] == 3


def test_global_mode_returns_the_map_reduced_answer_with_a_chat_model(tools):
    class FakeChat:
        name = "fake"

        def complete(self, prompt: str, max_tokens: int = 400) -> str:
            if prompt.startswith("Rate"):
                return "SCORE: 70\nfirmware and fleet reliability"
            return "The corpus is about Tern T3 fleet reliability."

    tools.graph.chat_model = FakeChat()
    try:
        (result,) = call_all(tools, Caller("alice"), [("explore_topics", {"query_text": "themes"})])
    finally:
        tools.graph.chat_model = None
    topics = payload(result)
    assert topics["answer"] == "The corpus is about Tern T3 fleet reliability."
    assert "answer_note" not in topics


def test_list_documents_pages_with_an_opaque_cursor(tools):
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        args: dict[str, Any] = {"limit": 2}
        if cursor:
            args["cursor"] = cursor
        (page,) = [payload(r) for r in call_all(tools, Caller("alice"),
                                                [("list_documents", args)])]
        seen += [d["document"] for d in page["documents"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert not cursor.isdigit()  # opaque
    assert len(seen) == len(set(seen)) == 9 and pages >= 5
    assert decode_cursor(encode_cursor(41)) == 41


# -- argument bounds --------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "args", "argument"), [
    ("search_documents", {"query_text": "E-417", "k": 0}, "k"),
    ("search_documents", {"query_text": "E-417", "k": 51}, "k"),
    ("search_documents", {"query_text": "E-417", "mode": "everything"}, "mode"),
    ("search_documents", {"query_text": "x" * 2001}, "query_text"),
    ("lookup_knowledge", {"query": "   "}, "query"),
    ("lookup_knowledge", {}, "query"),
    ("document_context", {"query_text": "E-417", "token_budget": 100}, "token_budget"),
    ("document_context", {"query_text": "E-417", "token_budget": 16001}, "token_budget"),
    ("list_documents", {"limit": 201}, "limit"),
    ("list_documents", {"cursor": "not-a-cursor"}, "cursor"),
    ("explore_topics", {"k": 99}, "k"),
    ("search_documents", {"query_text": "E-417", "namespace": "engineering"}, "namespace"),
    ("search_entities", {"query_text": "Tern", "role": "admin"}, "role"),
])
def test_bad_arguments_are_tool_errors_naming_the_argument(tools, name, args, argument):
    (result,) = call_all(tools, Caller("alice"), [(name, args)])
    message = error_text(result)
    assert argument in message and name in message


def test_text_arguments_are_refused_by_the_governed_entry_in_each_tool_s_words(tools):
    """The query's length is checked once, by Governance, which calls it query_text: MCP
    words the refusal like a schema error, and ``search`` (whose argument is ``query``)
    gets its own spelling back, over MCP and the JSON API alike."""
    long = "x" * 2001
    results = call_all(tools, Caller("alice"), [("search", {"query": long}),
                                                ("search_documents", {"query_text": long}),
                                                ("fetch", {"id": long})])
    assert [error_text(r) for r in results] == [
        "invalid arguments for search: query: 2001 characters; the limit is 2000",
        "invalid arguments for search_documents: query_text: 2001 characters; the limit is "
        "2000",
        "invalid arguments for fetch: id: 2001 characters; the limit is 2000"]
    with pytest.raises(InvalidQuery, match=r"^query: 2001 characters; the limit is 2000$"):
        tools.call("search", Caller("alice"), {"query": long})


def test_a_session_survives_errors(tools):
    results = call_all(tools, Caller("alice"), [
        ("search_documents", {"query_text": "E-417", "k": 500}),
        ("no_such_tool", {}),
        ("search_documents", {"query_text": "E-417", "k": 2}),
    ])
    assert results[0].is_error and results[1].is_error
    assert payload(results[2])["count"] == 2


# -- governance -----------------------------------------------------------------------------

def test_a_caller_without_entitlements_is_denied_by_every_tool(tools):
    calls = [(name, {"query": "E-417"} if name in ("lookup_knowledge", "search")
              else {} if name in ("explore_topics", "list_documents", "index_status")
              else {"id": "eng/errors.md"} if name in ("read_document", "fetch")
              else {"query_text": "E-417"}) for name in TOOL_NAMES]
    results = call_all(tools, Caller("mallory"), calls)
    for (name, _), result in zip(calls, results, strict=True):
        message = error_text(result)
        assert "access denied" in message and "mallory" in message, name
    records = tools.governance.audit.recent(len(TOOL_NAMES))
    assert all(r["outcome"] == "denied" for r in records)


def test_a_role_the_caller_does_not_hold_is_denied(tools):
    (result,) = call_all(tools, Caller("bob", "admin"), [("index_status", {})])
    assert "does not hold role 'admin'" in error_text(result)


def test_two_callers_get_different_answers_to_the_same_call(tools):
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search_documents", {"query_text": "Tern T3 E-417 ticket escalation", "k": 20}),
        ("lookup_knowledge", {"query": "Castellan Pharma escalation Heron H7"}),
        ("search_entities", {"query_text": "Castellan", "k": 5}),
        ("list_documents", {"limit": 200}),
        ("index_status", {}),
        ("document_context", {"query_text": "Castellan Pharma Heron H7 recall",
                              "token_budget": 2000}),
    ]
    alice = [payload(r) for r in call_all(tools, Caller("alice"), calls)]
    bob = [payload(r) for r in call_all(tools, Caller("bob"), calls)]
    assert alice != bob

    def namespaces(search: dict[str, Any]) -> set[str]:
        return {r["namespace"] for r in search["results"]}

    assert "engineering" in namespaces(alice[0]) and namespaces(bob[0]) == {"support"}
    hidden = "public.tickets.body/3"
    shown = json.dumps([{k: v for k, v in r.items() if k not in ("query", "query_text")}
                        for r in bob])
    assert hidden not in shown
    assert "Castellan" not in shown and "Heron H7 recall" not in shown
    assert any(e["document_id"].startswith(hidden) for e in alice[1]["evidence"])
    assert alice[2]["entities"] and not bob[2]["entities"]
    assert alice[3]["count"] == 9 and bob[3]["count"] == 4  # sla, faq, tickets 1 and 4
    assert [n["namespace"] for n in bob[4]["namespaces"]] == ["support"]
    assert "Castellan" in json.dumps(alice[5])


def test_an_active_role_narrows_the_caller(tools):
    (status,) = [payload(r) for r in call_all(tools, Caller("alice", "eng"),
                                              [("index_status", {})])]
    assert [n["namespace"] for n in status["namespaces"]] == ["engineering"]


def test_every_operation_is_registered_once():
    assert list(TOOLS) == TOOL_NAMES
