"""What one ``lookup_knowledge`` costs on the embedded store, counted: the SQL statements it
runs, its write transactions and the docgraph modules it runs code in.

One warm call through the real MCP client (after three, so what a process does once is not
counted), on the small two-namespace corpus of the MCP tests. A connection's set-up (its
PRAGMAs) is not counted: the BM25 lane runs on a pool thread, and whichever of the pool's
threads first meets this index opens its connection then (``tests/store/test_store.py``
pins that a thread's connection is reused). The counts are ceilings: a
change that adds a statement or a module to the hot path fails here and has to say why.
"""

from __future__ import annotations

import sqlite3
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import anyio
import pytest
from mcp import Client

import docgraph
from docgraph.governance import Caller
from docgraph.serve.mcp import build_mcp_server, fixed_caller
from tests.serve.test_mcp_tools import build_corpus, make_tools, open_isolated_graph

PACKAGE = str(Path(docgraph.__file__).parent)

#: Statements of one warm lookup (docs/ARCHITECTURE.md, "What a lookup costs", says which).
MAX_STATEMENTS = 12
#: Modules of docgraph whose code runs during one warm lookup of a question not asked before
#: in the process (its words tokenized: text, normalize, lexical; lanes are modules of their
#: own, so this counts the shape, not a hop per layer). With the caller's permission filter
#: (store/restricted.py) and the request's id and spans (telemetry/, no-ops when off).
MAX_MODULES = 62


@dataclass
class Cost:
    """What was counted while ``counting`` was on."""

    counting: bool = False
    statements: list[str] = field(default_factory=list)
    modules: set[str] = field(default_factory=set)


@pytest.fixture
def cost(monkeypatch: pytest.MonkeyPatch) -> Iterator[Cost]:
    """Every SQLite connection opened from now on reports its statements; every function
    call (in every thread started from now on) its module."""
    counted = Cost()
    connect = sqlite3.connect

    def traced_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)
        connection.set_trace_callback(
            lambda sql: counted.statements.append(sql) if counted.counting else None)
        return connection

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if counted.counting and event == "call":
            name = frame.f_code.co_filename
            if name.startswith(PACKAGE):
                counted.modules.add(name[len(PACKAGE) + 1:])

    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    sys.setprofile(profile)
    threading.setprofile(profile)  # type: ignore[arg-type]
    try:
        yield counted
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def warm_lookup(tmp_path: Path, cost: Cost) -> dict[str, Any]:
    """Index the corpus, ask three times, then count a fourth question."""
    graph = build_corpus(open_isolated_graph(tmp_path / "index.db"), tmp_path)
    server = build_mcp_server(make_tools(graph), fixed_caller(Caller("alice")))
    answer: dict[str, Any] = {}

    async def main() -> None:
        async with Client(server) as client:
            for warm_up in ("What caused the Rotterdam outage?", "Who gets a P1 response?",
                            "How do I reboot a Tern T3?"):
                await client.call_tool("lookup_knowledge", {"query": warm_up})
            cost.counting = True
            result = await client.call_tool("lookup_knowledge",
                                            {"query": "Which firmware fixes E-417?"})
            cost.counting = False
            assert not result.is_error, result.content[0].text
            answer.update(result.structured_content or {})

    try:
        anyio.run(main)
    finally:
        graph.close()
    return answer


def test_a_lookup_runs_a_bounded_number_of_statements_and_writes_once(tmp_path, cost):
    answer = warm_lookup(tmp_path, cost)
    assert answer["evidence"], "the lookup found nothing: the counts would mean nothing"
    statements = [" ".join(s.split()) for s in cost.statements
                  if not s.startswith("PRAGMA")]
    listing = "\n".join(statements)
    assert len(statements) <= MAX_STATEMENTS, listing
    # The audit record and the traces of the request in one transaction, nothing else.
    writes = [s for s in statements if s.startswith(("BEGIN", "INSERT", "UPDATE", "DELETE"))]
    assert [s for s in writes if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"], listing
    assert any(s.startswith("INSERT INTO traces") for s in writes), listing
    assert any(s.startswith("INSERT INTO audit_log") for s in writes), listing
    # The model is checked when the index opens, not per query.
    assert not any("embed_model" in s for s in statements), listing


def test_a_lookup_runs_code_in_a_bounded_set_of_modules(tmp_path, cost):
    warm_lookup(tmp_path, cost)
    modules = sorted(cost.modules)
    assert len(modules) <= MAX_MODULES, "\n".join(modules)
    # Nothing of the build side or the facade is on the query path.
    assert not [m for m in modules if m.startswith(("ingest/", "lifecycle/", "app.py"))], modules
