"""`docgraph mcp-config`: each host's snippet, merged into its file without losing anything,
and a printed stdio snippet that really starts a working server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from typer.testing import CliRunner

from docgraph.errors import ConfigError
from docgraph.serve.cli import app
from docgraph.serve.host_config import HOSTS, host_snippet, merge_into
from tests.helpers import write_files

SECRET = "s3cr3t-token-value"


@pytest.fixture
def deployment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An indexed folder with a settings file naming its policy and stdio caller; the
    current directory is elsewhere, as an agent host's would be."""
    for key in ("DOCGRAPH_CONFIG", "DOCGRAPH_STORE__PATH", "DOCGRAPH_STORE__BACKEND"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("DOCGRAPH_EMBED__MODEL", "hashing")
    (tmp_path / "policy.yaml").write_text(
        "assignments:\n  - {user: ann, role: reader, domain: notes}\n", encoding="utf-8")
    config = tmp_path / "docgraph.toml"
    config.write_text(f'[store]\npath = "{(tmp_path / "index.db").as_posix()}"\n'
                      f'[embed]\nmodel = "hashing"\n'
                      f'[governance]\npolicy_file = "{(tmp_path / "policy.yaml").as_posix()}"\n'
                      '[serve]\nstdio_user = "ann"\n', encoding="utf-8")
    folder = write_files(tmp_path / "notes", {"a.md": "# A\n\nThe Tern T3 fixes E-417.\n"})
    done = CliRunner().invoke(app, ["--config", str(config), "index", str(folder),
                                    "-n", "notes"])
    assert done.exit_code == 0, done.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return config


def _printed(*args: str) -> dict[str, Any]:
    done = CliRunner().invoke(app, list(args))
    assert done.exit_code == 0, done.output
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.mark.parametrize("host", HOSTS)
def test_stdio_snippets_run_this_docgraph_on_this_index(deployment, host):
    config = _printed("--config", str(deployment), "mcp-config", host)
    servers = config["servers" if host == "vscode" else "mcpServers"]
    entry = servers["docgraph"]
    assert Path(entry["command"]).is_absolute()
    args = entry["args"]
    assert args[args.index("--config") + 1] == str(deployment.absolute())
    assert Path(args[args.index("--index") + 1]).is_absolute() and args[-1] == "mcp"
    assert entry.get("type", "stdio") == "stdio"


@pytest.mark.parametrize("host", HOSTS)
def test_http_snippets_carry_a_token_reference_never_a_token(deployment, host):
    config = _printed("mcp-config", host, "--http", "https://docs.example/mcp")
    text = json.dumps(config)
    assert "https://docs.example/mcp" in text and SECRET not in text
    entry = config["servers" if host == "vscode" else "mcpServers"]["docgraph"]
    if host == "claude-desktop":
        assert entry["command"] == "npx" and "mcp-remote" in entry["args"]
        assert entry["env"]["DOCGRAPH_AUTH_HEADER"] == "Bearer <token>"
    elif host == "claude-code":
        assert entry == {"type": "http", "url": "https://docs.example/mcp",
                         "headers": {"Authorization": "Bearer ${DOCGRAPH_TOKEN}"}}
    elif host == "cursor":
        assert entry["headers"] == {"Authorization": "Bearer ${env:DOCGRAPH_TOKEN}"}
    else:
        assert entry["headers"] == {"Authorization": "Bearer ${input:docgraph-token}"}
        assert config["inputs"][0]["id"] == "docgraph-token" and config["inputs"][0]["password"]


def test_write_merges_into_the_host_file_and_keeps_everything_else(deployment, tmp_path):
    target = tmp_path / "mcp.json"
    target.write_text(json.dumps({"inputs": [{"id": "other", "type": "promptString"}],
                                  "servers": {"github": {"type": "http",
                                                         "url": "https://gh.example"}},
                                  "keep": 1}), encoding="utf-8")
    for _ in range(2):  # writing twice replaces docgraph's entry instead of adding another
        done = CliRunner().invoke(app, ["mcp-config", "vscode", "--http",
                                        "https://docs.example/mcp", "--write",
                                        "--file", str(target)])
        assert done.exit_code == 0, done.output
    merged = json.loads(target.read_text(encoding="utf-8"))
    assert set(merged["servers"]) == {"github", "docgraph"} and merged["keep"] == 1
    assert [i["id"] for i in merged["inputs"]] == ["other", "docgraph-token"]

    broken = tmp_path / "broken.json"
    broken.write_text("{ not json", encoding="utf-8")
    snippet = host_snippet("cursor", "docgraph", http_url="https://docs.example/mcp")
    with pytest.raises(ConfigError, match=r"broken\.json"):
        merge_into(snippet, "docgraph", broken)
    assert broken.read_text(encoding="utf-8") == "{ not json"
    with pytest.raises(ConfigError, match="host 'zed'"):
        host_snippet("zed", "docgraph", http_url="https://docs.example/mcp")


def test_the_printed_stdio_snippet_starts_a_working_server(deployment):
    entry = _printed("--config", str(deployment), "mcp-config",
                     "claude-code")["mcpServers"]["docgraph"]
    params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                   env={"PATH": "/usr/bin:/bin"}, cwd=str(Path.cwd()))
    seen: dict[str, Any] = {}

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(stdio_client(params)) as client:
                seen["tools"] = [t.name for t in (await client.list_tools()).tools]
                seen["search"] = await client.call_tool("search", {"query": "E-417"})

    anyio.run(main)
    assert "read_document" in seen["tools"] and "fetch" in seen["tools"]
    results = json.loads(seen["search"].content[0].text)["results"]
    assert results and results[0]["id"] == "notes/a.md#chunk-0"



def test_oauth_snippets_hold_the_url_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A host that speaks the MCP authorization spec signs in itself: no token, no header;
    without --http the URL is the server's own (serve.public_url + /mcp)."""
    for key in ("DOCGRAPH_CONFIG", "DOCGRAPH_SERVE__PUBLIC_URL"):
        monkeypatch.delenv(key, raising=False)
    config_file = tmp_path / "docgraph.toml"
    config_file.write_text('[serve]\npublic_url = "https://docs.example"\n'
                           '[auth]\nissuer = "https://login.example"\n', encoding="utf-8")
    url = "https://docs.example/mcp"
    for host in HOSTS:
        config = _printed("--config", str(config_file), "mcp-config", host, "--oauth")
        text = json.dumps(config)
        assert "Authorization" not in text and "token" not in text.lower()
        assert "inputs" not in config
        entry = config["servers" if host == "vscode" else "mcpServers"]["docgraph"]
        assert entry == {"claude-desktop": {"command": "npx",
                                            "args": ["-y", "mcp-remote", url]},
                         "cursor": {"url": url}}.get(host, {"type": "http", "url": url})
        other = _printed("mcp-config", host, "--oauth", "--http", "https://x.example/mcp")
        assert "https://x.example/mcp" in json.dumps(other) and url not in json.dumps(other)
