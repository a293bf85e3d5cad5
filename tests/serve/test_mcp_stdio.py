"""The stdio transport: `python -m docgraph.serve.cli mcp` spawned as a subprocess and driven
with the SDK's own stdio client; the caller comes from configuration (environment)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.backend_graphs import BACKEND_NAMES
from tests.pg import pgvector_server  # noqa: F401  (fixture of the postgres backend)
from tests.serve.test_mcp_tools import (
    POLICY_YAML,
    TOOL_NAMES,
    backend_for,
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


@pytest.fixture(params=BACKEND_NAMES)
def index_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """An index built by the test (on the embedded file or on PostgreSQL: every test here runs
    on both) and the environment that points a child process at it."""
    with backend_for(request, tmp_path) as backend:
        store = backend.store_settings()
        graph = build_corpus(open_isolated_graph(tmp_path / "index.db", store), tmp_path,
                             rows=False)
        graph.close()
        (tmp_path / "policy.yaml").write_text(POLICY_YAML, encoding="utf-8")
        yield {
            "DOCGRAPH_CONFIG": str(tmp_path / "absent-docgraph.toml"),
            "DOCGRAPH_EMBED__MODEL": "hashing",
            **{f"DOCGRAPH_STORE__{key.upper()}": str(value) for key, value in store.items()},
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


class RawStdioServer:
    """`docgraph mcp` as a subprocess spoken to line by line, bypassing the SDK client (which
    refuses to encode a lone surrogate); answers are read by a thread, so a missing answer
    is a timeout, not a hung test."""

    def __init__(self, env: dict[str, str], cwd: Path, errlog: IO[bytes]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "docgraph.serve.cli", "mcp"], env=env, cwd=cwd,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog)
        self.answers: queue.Queue[bytes | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 30) -> dict[str, Any]:
        try:
            line = self.answers.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no answer within {timeout} s")
        assert line is not None, "the server closed stdout"
        data: dict[str, Any] = json.loads(line)
        return data

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            return self.proc.wait(30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


def _call(request_id: int, arguments: str) -> bytes:
    return (f'{{"jsonrpc":"2.0","id":{request_id},"method":"tools/call","params":'
            f'{{"name":"search_documents","arguments":{arguments}}}}}').encode()


def test_every_stdio_request_is_answered_even_when_the_sdk_cannot_read_it(index_env, tmp_path):
    env = dict(index_env, DOCGRAPH_SERVE__STDIO_USER="alice")
    with (tmp_path / "stderr.log").open("wb") as errlog:
        server = RawStdioServer(env, tmp_path, errlog)
        try:
            server.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                    "params": {"protocolVersion": "2025-11-25",
                                               "capabilities": {},
                                               "clientInfo": {"name": "raw", "version": "0"}},
                                    }).encode())
            assert server.answer(60)["result"]["serverInfo"]["name"] == "docgraph"
            server.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

            # half an emoji, as a JavaScript host sends it
            server.send(_call(2, '{"query_text":"Tern \\ud83d"}'))
            answer = server.answer()
            assert answer["id"] == 2 and answer["error"]["code"] == -32602
            assert answer["error"]["message"] == (
                "invalid arguments for search_documents: query_text: contains an unpaired "
                "UTF-16 surrogate (U+D83D at character 5)")
            server.send(_call(3, '{"query_text":"E-417"'))  # truncated line
            answer = server.answer()
            assert answer["id"] == 3 and answer["error"]["code"] == -32700
            assert "not valid JSON" in answer["error"]["message"]
            # a Latin-1 host: the byte 0xE9 is not UTF-8
            server.send(_call(4, '{"query_text":"caf\u00e9"}').replace(b"\xc3\xa9", b"\xe9"))
            answer = server.answer()
            assert answer["id"] == 4 and "not valid UTF-8" in answer["error"]["message"]
            server.send(_call(5, '{"query_text":' + "[" * 30_000 + "]" * 30_000 + "}"))
            answer = server.answer()
            assert answer["id"] == 5 and "nested deeper than" in answer["error"]["message"]
            # a broken notification gets no answer (JSON-RPC never answers one), only a log
            server.send(b'{"jsonrpc":"2.0","method":"notifications/progress",'
                        b'"params":{"note":"\\udc00"}}')

            server.send(_call(6, '{"query_text":"firmware fix for E-417","k":2}'))
            answer = server.answer()
            assert answer["id"] == 6, answer  # the session survived all of the above
            assert json.loads(answer["result"]["content"][0]["text"])["count"] == 2
        finally:
            assert server.close() == 0
    log = (tmp_path / "stderr.log").read_text(encoding="utf-8", errors="replace")
    assert "ignored an invalid MCP notification" in log
    assert "refused an invalid MCP request" in log
