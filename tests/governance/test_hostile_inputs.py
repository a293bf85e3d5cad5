"""Hostile strings through every governed entry point and mode: only a validation error
naming the argument, or a result; never a crash, a traceback or a stored hidden id."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from docgraph.errors import InvalidQuery
from docgraph.governance import (
    CallableRowAuthorizer,
    Caller,
    Governance,
    RoleAssignment,
    StaticEntitlements,
)
from docgraph.serve.tools import TOOLS, DocgraphTools
from docgraph.store.sql.dialect import run
from tests import backend_graphs
from tests.governance_helpers import add_row_documents
from tests.helpers import CountingEmbedder, write_files

pgvector_server = backend_graphs.pgvector_server

HOSTILE = [
    "'; DROP TABLE chunks; --", '" OR 1=1 --', "NEAR(a b) AND OR NOT * ^ \"", "%_\\%",
    "a\x00b", "\ud800", "emoji \ud83d", "\udfff tail", "مرحبا بالعالم \u202e evil",
    "\u200f\u200e", "E-417" * 400, "x" * 60_000, "Nordhaven " * 100_000, "   ", "",
    "(((((((((", "*", "\\", "\n\t\r", "ﬁ ß İ", "SELECT * FROM documents",
]
texts = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=40),
                  st.text(alphabet=st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010),
                          max_size=8))


@pytest.fixture(scope="module", params=backend_graphs.BACKEND_NAMES)
def tools(request, tmp_path_factory):
    """Governed tools over a small index, once per backend."""
    root = tmp_path_factory.mktemp("hostile")
    with backend_graphs.graph_on_backend(request.param, request, root / "index.db",
                                         CountingEmbedder()) as graph:
        graph.index(write_files(root / "docs", {
            "a.md": "# Outage\n\nNordhaven Logistics lost the Tern T3 fleet to E-417 in "
                    "Rotterdam.\n",
            "b.md": "# Firmware\n\nFirmware 5.3.1 for Tern T3 fixes E-417 for Nordhaven.\n",
        }), namespace="ops")
        add_row_documents(graph, "ops", "tickets", {
            "1": "Ticket 1: Nordhaven Logistics asks about E-417 again.",
            "2": "Ticket 2: secret Castellan escalation about E-417 zqhidden.",
        })
        governance = Governance(
            graph, StaticEntitlements([RoleAssignment("alice", "r", "ops")]),
            CallableRowAuthorizer(lambda caller, table, pks: set(pks) - {"2"}))
        yield DocgraphTools(governance)


def _accepts(run) -> None:  # type: ignore[no-untyped-def]
    try:
        out = run()
    except InvalidQuery as exc:
        assert str(exc) and "Traceback" not in str(exc)
        return
    json.dumps(out if not hasattr(out, "to_dict") else out.to_dict(), default=str)


@settings(max_examples=60, deadline=None, suppress_health_check=[
    HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=texts, tool=st.sampled_from(sorted(TOOLS)),
       mode=st.sampled_from(["vector_first", "graph_first", "global", "hybrid", "dense"]))
def test_hostile_strings_get_a_validation_error_or_a_result(tools, text, tool, mode):
    caller = Caller("alice")
    governance = tools.governance
    field = {"lookup_knowledge": "query", "list_documents": "cursor"}.get(tool, "query_text")
    if tool != "index_status":
        _accepts(lambda: tools.call(tool, caller, {field: text}))
    _accepts(lambda: governance.retrieve(caller, text, k=5, mode=mode, return_trace=True))
    _accepts(lambda: governance.context(caller, text, token_budget=800))
    _accepts(lambda: governance.lookup(caller, text))
    _accepts(lambda: governance.entities(caller, text))
    _accepts(lambda: governance.entity_mentions(caller, text))
    _accepts(lambda: governance.neighbors(caller, text))


def test_the_same_refusal_everywhere_names_the_argument(tools):
    caller = Caller("alice")
    with pytest.raises(InvalidQuery, match="query_text: contains an unpaired UTF-16 surrogate"):
        tools.governance.retrieve(caller, "half an emoji \ud83d", mode="graph_first")
    with pytest.raises(InvalidQuery, match=r"query_text.*unpaired UTF-16 surrogate"):
        tools.call("search_documents", caller, {"query_text": "\ud800"})
    with pytest.raises(InvalidQuery, match="query: 60000 characters; the limit is 200"):
        tools.governance.entities(caller, "x" * 60_000)
    with pytest.raises(InvalidQuery, match="entity: contains a NUL character"):
        tools.governance.neighbors(caller, "E-417\x00")


def test_stored_traces_hold_no_hidden_row_and_no_query_text(tools):
    graph = tools.graph
    caller = Caller("alice")
    for mode in ("vector_first", "graph_first", "global"):
        tools.governance.retrieve(caller, "Castellan escalation E-417 zqhidden", k=10, mode=mode)
    rows = run(graph.store, "SELECT payload FROM traces ORDER BY created_at DESC LIMIT 3"
               ).fetchall()
    assert len(rows) == 3
    for (raw,) in rows:
        stored = graph.store.dialect.json_value(raw)
        payload = json.dumps(stored, ensure_ascii=False)
        assert "tickets.body/2" not in payload  # the hidden row, in no lane
        assert "zqhidden" not in payload and "Castellan escalation" not in payload
        assert stored["user_id"] == "alice"


def test_cli_refuses_hostile_input_with_one_line(tools, tmp_path, monkeypatch):
    from docgraph.serve.cli import app

    backend_graphs.point_the_cli_at(tools.graph, monkeypatch)
    path = str(tools.graph.settings.store.path)
    runner = CliRunner()
    for args in (["search", "\ud800"], ["entities", "x" * 60_000],
                 ["graph", "neighbors", "a\x00b"], ["lookup", "   "],
                 ["context", "\udfff"], ["search", "ok", "--mode", "sideways"]):
        done = runner.invoke(app, ["--index", path, *args])
        assert done.exit_code != 0
        assert isinstance(done.exception, (InvalidQuery, SystemExit)), (args, done.exception)
