"""The stdio transport: `python -m docgraph.serve.cli mcp` spawned as a subprocess and driven
with the SDK's own stdio client; the caller comes from configuration (environment)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.test_mcp_tools import (
    POLICY_YAML,
    TOOL_NAMES,
    build_corpus,
    error_text,
    open_isolated_graph,
    payload,
)

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("lookup_knowledge", {"query": "Which firmware fixes E-417?"}),
    ("search_documents", {"query_text": "firmware fix for E-417", "k": 3}),
    ("explore_topics", {"k": 3}),
    ("trace_connections", {"query_text": "Nordhaven Logistics and E-417", "k": 3}),
    ("document_context", {"query_text": "E-417", "token_budget": 500}),
    ("search_entities", {"query_text": "Tern", "k": 3}),
    ("list_documents", {"limit": 10}),
    ("index_status", {}),
]


@pytest.fixture
def index_env(tmp_path: Path) -> dict[str, str]:
    """An index built by the test and the environment that points a child process at it."""
    graph = build_corpus(open_isolated_graph(tmp_path / "index.db"), tmp_path, rows=False)
    graph.close()
    (tmp_path / "policy.yaml").write_text(POLICY_YAML, encoding="utf-8")
    return {
        "DOCGRAPH_CONFIG": str(tmp_path / "absent-docgraph.toml"),
        "DOCGRAPH_EMBED__MODEL": "hashing",
        "DOCGRAPH_STORE__PATH": str(tmp_path / "index.db"),
        "DOCGRAPH_GOVERNANCE__POLICY_FILE": str(tmp_path / "policy.yaml"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }


async def _session(env: dict[str, str], cwd: Path, log: Path,
                   calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "docgraph.serve.cli", "mcp"], env=env, cwd=cwd)
    with log.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            results = [await client.call_tool(name, args) for name, args in calls]
    return names, results


def test_stdio_server_serves_every_tool_as_the_configured_caller(index_env, tmp_path):
    alice = dict(index_env, DOCGRAPH_SERVE__STDIO_USER="alice", DOCGRAPH_SERVE__STDIO_ROLE="eng")
    mallory = dict(index_env, DOCGRAPH_SERVE__STDIO_USER="mallory")
    bad = [("search_documents", {"query_text": "E-417", "k": 0}),
           ("search_documents", {"query_text": "E-417", "namespace": "support"})]
    out: dict[str, tuple[list[str], list[Any]]] = {}

    async def main() -> None:
        async def run(key: str, env: dict[str, str], calls: list[Any]) -> None:
            out[key] = await _session(env, tmp_path, tmp_path / f"{key}.log", calls)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:  # both children start in parallel
                tg.start_soon(run, "alice", alice, CALLS + bad)
                tg.start_soon(run, "mallory", mallory, CALLS[:2])

    anyio.run(main)

    names, results = out["alice"]
    assert names == TOOL_NAMES
    data = [payload(r) for r in results[:len(CALLS)]]
    by_name = dict(zip([c[0] for c in CALLS], data, strict=True))
    assert by_name["lookup_knowledge"]["evidence"]
    assert {r["namespace"] for r in by_name["search_documents"]["results"]} == {"engineering"}
    assert by_name["explore_topics"]["reports"]
    assert by_name["trace_connections"]["results"]
    assert by_name["document_context"]["sections"]["Source Text"]
    assert by_name["search_entities"]["entities"]
    assert {d["namespace"] for d in by_name["list_documents"]["documents"]} == {"engineering"}
    # the configured role narrows alice to engineering
    assert [n["namespace"] for n in by_name["index_status"]["namespaces"]] == ["engineering"]
    assert "k" in error_text(results[len(CALLS)])
    assert "namespace" in error_text(results[len(CALLS) + 1])
    assert "support" not in json.dumps(data)

    names, results = out["mallory"]
    assert names == TOOL_NAMES
    for result in results:
        assert "access denied" in error_text(result)


def test_stdio_server_without_a_configured_caller_refuses_to_start(index_env, monkeypatch):
    from typer.testing import CliRunner

    from docgraph.serve.cli import app

    for key, value in index_env.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(app, ["mcp"])
    assert result.exit_code != 0
    assert "stdio_user" in str(result.exception)
