"""Agent setup that starts: README's "Connect your agent" followed literally, with and
without ``[governance]``; every snippet is launched the way a host launches it (the exact
command and args `docgraph mcp-config` printed, the host's own environment, another working
directory) and driven with the MCP SDK's stdio client."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from typer.testing import CliRunner, Result

from docgraph.config import load_settings
from docgraph.serve.cli import app
from tests.conftest import REPO, SAMPLE_CORPUS
from tests.helpers import write_files
from tests.serve.test_mcp_tools import error_text, payload

SRC = str(REPO / "src")  # the host imports this checkout


def _cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def _text(output: str) -> str:
    """Output with rich's line wrapping undone (one space for every run of whitespace)."""
    return " ".join(output.split())


def _entry(config: dict[str, Any]) -> dict[str, Any]:
    servers = config.get("mcpServers") or config["servers"]
    entry: dict[str, Any] = servers["docgraph"]
    return entry


def _launch(entry: dict[str, Any], cwd: Path, calls: list[tuple[str, dict[str, Any]]],
            errlog: Path) -> dict[str, Any]:
    """Start ``entry`` as a host does (its command and args, the host's environment: the
    SDK's default one plus what imports this checkout, in ``cwd``) and make ``calls``."""
    params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                   env={**entry.get("env", {}), "PYTHONPATH": SRC},
                                   cwd=str(cwd))
    seen: dict[str, Any] = {}

    async def main() -> None:
        with anyio.fail_after(120), errlog.open("w", encoding="utf-8") as log:
            async with Client(stdio_client(params, errlog=log)) as client:
                seen["tools"] = {t.name: t for t in (await client.list_tools()).tools}
                seen["results"] = [await client.call_tool(name, args) for name, args in calls]

    anyio.run(main)
    return seen


def _elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture
def quickstart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """README's "Connect your agent" in a project folder: `docgraph index examples/corpus
    --namespace demo`, no [governance]. The folder's docgraph.toml only picks the hashing
    embedder (no model download); the host's environment has no DOCGRAPH_* variable."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "docgraph.toml").write_text('[embed]\nmodel = "hashing"\n', encoding="utf-8")
    monkeypatch.delenv("DOCGRAPH_CONFIG")
    monkeypatch.chdir(project)
    done = _cli("index", str(SAMPLE_CORPUS), "--namespace", "demo")
    assert done.exit_code == 0, done.output
    return project


QUESTION = "What does error E-417 mean?"


def test_the_readme_snippet_without_governance_serves_the_index_owner(quickstart, tmp_path):
    # every CLI read command works without governance ...
    looked_up = _cli("lookup", QUESTION)
    assert looked_up.exit_code == 0, looked_up.output
    cli_evidence = json.loads(looked_up.stdout)["evidence"]
    assert cli_evidence

    # ... and so does the stdio server the snippet starts: no --user, no placeholder
    done = _cli("mcp-config", "claude-desktop")
    assert done.exit_code == 0, done.output
    entry = _entry(json.loads(done.stdout))
    assert "--user" not in entry["args"] and "USER" not in entry["args"]
    assert "index owner" in _text(done.stderr)
    seen = _launch(entry, _elsewhere(tmp_path), [("lookup_knowledge", {"query": QUESTION}),
                                                 ("index_status", {})],
                   tmp_path / "server.log")
    lookup, status = (payload(r) for r in seen["results"])
    assert lookup["evidence"] == cli_evidence  # the same caller, the same evidence
    assert [n["namespace"] for n in status["namespaces"]] == ["demo"]


def test_the_written_snippet_needs_no_edit(quickstart, tmp_path):
    target = tmp_path / "claude_desktop_config.json"
    done = _cli("mcp-config", "claude-desktop", "--write", "--file", str(target))
    assert done.exit_code == 0, done.output
    entry = _entry(json.loads(target.read_text(encoding="utf-8")))
    assert "USER" not in entry["args"]
    seen = _launch(entry, _elsewhere(tmp_path), [("search", {"query": "E-417"})],
                   tmp_path / "server.log")
    assert payload(seen["results"][0])["results"]


POLICY = "assignments:\n  - {user: ann, role: reader, domain: notes}\n"


@pytest.fixture
def console_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project whose settings file names its files relatively (as README's console
    section writes them: ``policy_file = "policy.yaml"``), indexed from that folder."""
    project = tmp_path / "project"
    write_files(project, {"notes/a.md": "# A\n\nThe Tern T3 fixes E-417.\n",
                          "policy.yaml": POLICY})
    (project / "docgraph.toml").write_text(
        '[store]\npath = "data/index.db"\n[embed]\nmodel = "hashing"\n'
        '[governance]\npolicy_file = "policy.yaml"\n', encoding="utf-8")
    monkeypatch.chdir(project)
    done = _cli("--config", "docgraph.toml", "index", "notes", "--namespace", "notes")
    assert done.exit_code == 0, done.output
    assert (project / "data" / "index.db").is_file()
    return project / "docgraph.toml"


@pytest.fixture
def governed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A governed project whose settings file names every file absolutely (so what is
    tested does not hang on relative paths), indexed; returns the settings file."""
    project = tmp_path / "governed"
    write_files(project, {"notes/a.md": "# A\n\nThe Tern T3 fixes E-417.\n",
                          "policy.yaml": POLICY})
    config = project / "docgraph.toml"
    config.write_text(f'[store]\npath = "{project / "index.db"}"\n[embed]\nmodel = "hashing"\n'
                      f'[governance]\npolicy_file = "{project / "policy.yaml"}"\n',
                      encoding="utf-8")
    monkeypatch.chdir(project)
    done = _cli("--config", str(config), "index", str(project / "notes"), "-n", "notes")
    assert done.exit_code == 0, done.output
    return config


def test_with_governance_and_no_caller_mcp_config_refuses_naming_both_ways(console_settings,
                                                                          tmp_path):
    target = tmp_path / "mcp.json"
    for extra in ([], ["--write", "--file", str(target)]):
        done = _cli("--config", str(console_settings), "mcp-config", "claude-code", *extra)
        assert done.exit_code == 1, done.output
        assert done.stdout == ""
        message = _text(done.stderr)
        assert "docgraph --user NAME mcp-config" in message
        assert "[serve] stdio_user" in message  # the literal text, not eaten by rich markup
    assert not target.exists()


def test_relative_paths_of_the_settings_file_hold_when_the_host_starts_elsewhere(
        console_settings, tmp_path):
    done = _cli("--config", "docgraph.toml", "--user", "ann", "mcp-config", "claude-code")
    assert done.exit_code == 0, done.output
    entry = _entry(json.loads(done.stdout))
    args = entry["args"]
    assert args[args.index("--config") + 1] == str(console_settings)
    assert args[args.index("--user") + 1] == "ann"
    seen = _launch(entry, _elsewhere(tmp_path), [("search", {"query": "E-417"})],
                   tmp_path / "server.log")
    assert payload(seen["results"][0])["results"][0]["id"] == "notes/a.md#chunk-0"


def test_settings_file_paths_resolve_beside_the_file_and_env_paths_beside_the_cwd(
        tmp_path, monkeypatch):
    folder = tmp_path / "conf"
    folder.mkdir()
    config = folder / "docgraph.toml"
    config.write_text(
        '[store]\npath = "data/index.db"\nmilvus_uri = "chunks.milvus.db"\n'
        '[graph.vocabulary_files]\nproduct = "terms/products.txt"\n'
        '[sources]\nsecrets_file = "secrets.toml"\n'
        '[governance]\npolicy_file = "policy.yaml"\nsql_url = "sqlite:///rights.db?mode=ro"\n'
        '[governance.row_source_urls]\ncrm = "sqlite+pysqlite:///crm.db"\n'
        'erp = "postgresql://db/erp"\nmem = "sqlite:///:memory:"\n'
        '[serve]\ntokens_file = "tokens.toml"\n', encoding="utf-8")
    monkeypatch.chdir(_elsewhere(tmp_path))
    settings = load_settings(config)
    assert settings.store.path == folder / "data" / "index.db"
    assert settings.store.milvus_uri == str(folder / "chunks.milvus.db")
    assert settings.graph.vocabulary_files == {"product": folder / "terms" / "products.txt"}
    assert settings.sources.secrets_file == folder / "secrets.toml"
    assert settings.governance.policy_file == folder / "policy.yaml"
    assert settings.serve.tokens_file == folder / "tokens.toml"
    assert settings.governance.sql_url == f"sqlite:///{folder / 'rights.db'}?mode=ro"
    assert settings.governance.row_source_urls == {
        "crm": f"sqlite+pysqlite:///{folder / 'crm.db'}", "erp": "postgresql://db/erp",
        "mem": "sqlite:///:memory:"}
    # the same setting from the environment, or a default, stays relative to the cwd
    monkeypatch.setenv("DOCGRAPH_GOVERNANCE__POLICY_FILE", "policy.yaml")
    assert load_settings(config).governance.policy_file == Path("policy.yaml")
    assert load_settings().store.path == Path(".docgraph/index.db")
    # a server URI is no file
    config.write_text('[store]\nmilvus_uri = "http://milvus:19530"\n', encoding="utf-8")
    assert load_settings(config).store.milvus_uri == "http://milvus:19530"


def test_mcp_config_refuses_a_snippet_that_would_not_start(console_settings, tmp_path,
                                                           monkeypatch):
    target = tmp_path / "mcp.json"

    def refused(*args: str) -> str:
        done = _cli(*args, "mcp-config", "cursor", "--write", "--file", str(target))
        assert done.exit_code == 1, done.output
        assert not target.exists()
        return _text(done.stderr)

    missing = tmp_path / "nowhere" / "index.db"
    assert f"no index at {missing}" in refused("--config", str(console_settings),
                                               "--user", "ann", "--index", str(missing))
    assert not missing.exists()  # the check creates no index

    (console_settings.parent / "policy.yaml").unlink()
    assert "policy.yaml" in refused("--config", str(console_settings), "--user", "ann")

    # governance only in this shell's environment: the host would run ungoverned
    bare = console_settings.parent / "bare.toml"
    bare.write_text(f'[store]\npath = "{console_settings.parent / "data" / "index.db"}"\n'
                    '[embed]\nmodel = "hashing"\n', encoding="utf-8")
    write_files(tmp_path, {"env-policy.yaml": POLICY})
    monkeypatch.setenv("DOCGRAPH_GOVERNANCE__POLICY_FILE", str(tmp_path / "env-policy.yaml"))
    assert "DOCGRAPH_GOVERNANCE__" in refused("--config", str(bare), "--user", "ann")


def test_mcp_warns_at_start_up_about_a_caller_without_role_assignments(governed, tmp_path):
    entry = {"command": sys.executable,
             "args": ["-m", "docgraph.serve.cli", "--config", str(governed),
                      "mcp", "--user", "nobody"]}
    log = tmp_path / "server.log"
    seen = _launch(entry, _elsewhere(tmp_path), [("search", {"query": "E-417"})], log)
    assert "access denied" in error_text(seen["results"][0])
    stderr = _text(log.read_text(encoding="utf-8"))
    assert "warning: user 'nobody' has no role assignments" in stderr
    assert str(governed.parent / "policy.yaml") in stderr


def test_query_and_query_text_are_accepted_for_each_other(governed, tmp_path):
    done = _cli("--config", str(governed), "--user", "ann", "mcp-config", "vscode")
    assert done.exit_code == 0, done.output
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search_documents", {"query": "E-417", "k": 1}),
        ("lookup_knowledge", {"query_text": "Which firmware fixes E-417?"}),
        ("search", {"query_text": "E-417"}),
        ("search_entities", {"query": "E-417"}),
        ("search_documents", {"q": "E-417"}),
        ("search_documents", {"query": "E-417", "query_text": "E-417"}),
        ("lookup_knowledge", {"question": QUESTION, "namespace": "notes"}),
    ]
    seen = _launch(_entry(json.loads(done.stdout)), _elsewhere(tmp_path), calls,
                   tmp_path / "server.log")
    ok = [payload(r) for r in seen["results"][:4]]
    assert ok[0]["count"] == 1 and ok[0]["query_text"] == "E-417"
    assert ok[1]["evidence"] and ok[2]["results"] and ok[3]["entities"]
    unknown, both, scoped = (error_text(r) for r in seen["results"][4:])
    assert unknown == ("invalid arguments for search_documents: unexpected argument(s) q; "
                       "search_documents takes query_text (required), k, mode")
    assert "query is accepted for query_text, but not together with it" in both
    assert "lookup_knowledge takes query (required)" in scoped
    assert "tools take no namespace, domain or role" in scoped

    # the schemas keep one canonical name and stay valid JSON Schema; descriptions tell
    tools = seen["tools"]
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
    search_documents = tools["search_documents"].input_schema
    assert set(search_documents["properties"]) == {"query_text", "k", "mode"}
    assert search_documents["required"] == ["query_text"]
    assert set(tools["lookup_knowledge"].input_schema["properties"]) == {"query"}
    assert "query is accepted for query_text" in (tools["search_documents"].description or "")
    assert "query_text is accepted for query" in (tools["search"].description or "")
    assert "accepted for" not in (tools["read_document"].description or "")


def test_the_json_api_path_accepts_the_alias_and_names_expected_arguments(governed):
    from docgraph import DocGraph
    from docgraph.errors import InvalidQuery
    from docgraph.governance import Caller
    from docgraph.serve.setup import build_governance
    from docgraph.serve.tools import DocgraphTools

    ann = Caller("ann")
    with DocGraph.open(config_file=governed) as graph:
        tools = DocgraphTools(build_governance(graph))
        assert tools.call("search_documents", ann, {"query": "E-417", "k": 1})["count"] == 1
        assert tools.call("search", ann, {"query_text": "E-417"})["results"]
        with pytest.raises(InvalidQuery, match=r"^q: unexpected argument\(s\); search_documents "
                                               r"takes query_text \(required\), k, mode$"):
            tools.call("search_documents", ann, {"q": "E-417"})
