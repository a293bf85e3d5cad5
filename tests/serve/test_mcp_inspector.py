"""`docgraph mcp` driven by a client that is not the Python SDK: the MCP Inspector CLI from
npm (``@modelcontextprotocol/inspector``, TypeScript SDK) lists the tools and the prompt and
calls every tool once over stdio.

``.ci/run`` installs the pinned Inspector into ``.ci/node/`` (ignored by git). Version 0.15.0
is the newest release that runs on Node 20: every later one declares ``node >= 22.7.5``.
Without node or the installed package the test is skipped, saying so (and fails under
``DOCGRAPH_REQUIRE_SERVICES=1``, like every test needing a service).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from docgraph.serve.cli import app
from tests.conftest import REPO
from tests.helpers import write_files
from tests.serve.test_mcp_tools import TOOL_NAMES

# e2e: the module's server indexes with the real (default) embedding model
pytestmark = pytest.mark.e2e

INSPECTOR_VERSION = "0.15.0"
NODE_DIR = REPO / ".ci" / "node"
INSPECTOR = NODE_DIR / "node_modules" / ".bin" / "mcp-inspector"

CORPUS = {
    "firmware.md": "# Tern T3 firmware\n\nFirmware 5.3.1 fixes error E-417 on the Tern T3 "
                   "fleet of Nordhaven Logistics.\n\n## Rollout\n\nThe Roost gateway pushes "
                   "firmware 5.3.1 to every Tern T3.\n",
    "errors.md": "# Error codes\n\nE-417: CAN bus watchdog timeout on the Tern T3. Install "
                 "firmware 5.3.1.\n",
}


def _inspector() -> Path:
    if shutil.which("node") is None or shutil.which("npx") is None:
        pytest.skip("node/npx not found: the MCP Inspector CLI needs Node.js (.ci/run "
                    "installs it into .ci/node)")
    if not INSPECTOR.exists():
        pytest.skip(f"MCP Inspector CLI not installed: run `npm install --prefix .ci/node "
                    f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}` (.ci/run does)")
    return INSPECTOR


@pytest.fixture(scope="module")
def server_command(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The stdio server command line over a small corpus indexed with the real (default)
    embedding model (settings in a file, so the Inspector's child needs no environment of
    ours)."""
    root = tmp_path_factory.mktemp("inspector")
    (root / "policy.yaml").write_text(
        "assignments:\n  - {user: ann, role: reader, domain: eng}\n", encoding="utf-8")
    config = root / "docgraph.toml"
    config.write_text(f'[store]\npath = "{(root / "index.db").as_posix()}"\n'
                      f'[governance]\npolicy_file = "{(root / "policy.yaml").as_posix()}"\n'
                      '[serve]\nstdio_user = "ann"\n', encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        for key in ("DOCGRAPH_STORE__PATH", "DOCGRAPH_STORE__BACKEND", "DOCGRAPH_CONFIG",
                    "DOCGRAPH_EMBED__MODEL"):
            patch.delenv(key, raising=False)
        done = CliRunner().invoke(app, ["--config", str(config), "index",
                                        str(write_files(root / "eng", CORPUS)), "-n", "eng"])
    assert done.exit_code == 0, done.output
    return [sys.executable, "-m", "docgraph.serve.cli", "--config", str(config), "mcp"]


def inspect(command: list[str], method: str, tool: str | None = None,
            **arguments: object) -> dict[str, Any]:
    """One Inspector CLI call; its JSON answer. The server command follows ``--``, so the
    Inspector does not take docgraph's ``--config`` for its own."""
    args = [str(_inspector()), "--cli"]
    if tool is not None:
        args += ["--tool-name", tool]
    if arguments:  # a variadic option: the next option ends it
        args += ["--tool-arg", *(f"{key}={value}" for key, value in arguments.items())]
    args += ["--method", method, "--", *command]
    done = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _result(answer: dict[str, Any]) -> dict[str, Any]:
    assert not answer.get("isError"), answer
    (content,) = answer["content"]
    assert content["type"] == "text"
    data: dict[str, Any] = json.loads(content["text"])
    return data


def test_the_inspector_lists_every_tool_and_the_prompt(server_command):
    tools = inspect(server_command, "tools/list")["tools"]
    assert [t["name"] for t in tools] == TOOL_NAMES
    assert all(t["inputSchema"]["type"] == "object" and t["description"] for t in tools)
    prompts = inspect(server_command, "prompts/list")["prompts"]
    assert [p["name"] for p in prompts] == ["research_question"]


def test_the_inspector_calls_every_tool(server_command):
    def call(tool: str, **arguments: object) -> dict[str, Any]:
        return _result(inspect(server_command, "tools/call", tool, **arguments))

    found = call("search", query="Which firmware fixes E-417?")["results"]
    assert found and found[0]["id"].startswith("eng/")
    first = found[0]["id"]
    answers = {
        "lookup_knowledge": call("lookup_knowledge", query="Which firmware fixes E-417?"),
        "search_documents": call("search_documents", query_text="firmware E-417", k=3),
        "explore_topics": call("explore_topics", k=2),
        "trace_connections": call("trace_connections", query_text="Tern T3 and E-417"),
        "document_context": call("document_context", query_text="E-417", token_budget=500),
        "search_entities": call("search_entities", query_text="Tern"),
        "list_documents": call("list_documents", limit=10),
        "index_status": call("index_status"),
        "read_document": call("read_document", id=first, scope="section"),
        "search": {"results": found},
        "fetch": call("fetch", id=first),
    }
    assert set(answers) == set(TOOL_NAMES)
    assert answers["lookup_knowledge"]["evidence"][0]["document_id"].startswith("eng/")
    assert answers["search_documents"]["results"]
    assert "reports" in answers["explore_topics"]
    assert "results" in answers["trace_connections"]
    assert answers["document_context"]["sections"]["Source Text"]
    assert answers["search_entities"]["entities"]
    assert answers["list_documents"]["count"] == 2
    assert answers["index_status"]["namespaces"][0]["namespace"] == "eng"
    assert first in [c["chunk_id"] for c in answers["read_document"]["chunks"]]
    assert answers["fetch"]["id"] == first and "E-417" in answers["fetch"]["text"]
    assert "file://" not in json.dumps(answers)
