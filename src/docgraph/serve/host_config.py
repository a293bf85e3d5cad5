"""Configuration snippets that connect agent hosts to docgraph (``docgraph mcp-config``).

Each host keeps its MCP servers in a JSON file of its own shape:

* Claude Desktop: ``claude_desktop_config.json``, ``{"mcpServers": {name: {"command",
  "args"}}}``. Its file has no remote (URL) entries, so an HTTP server is reached through
  the ``mcp-remote`` bridge from npm with the bearer token in an environment variable.
* Claude Code: ``.mcp.json`` in the project, ``{"mcpServers": {name: {"type": "stdio",
  "command", "args"}}}`` or ``{"type": "http", "url", "headers"}``; ``${VAR}`` in a header
  is read from the environment.
* Cursor: ``~/.cursor/mcp.json``, ``{"mcpServers": {name: {"command", "args"}}}`` or
  ``{"url", "headers"}``; ``${env:VAR}`` is read from the environment.
* VS Code: ``.vscode/mcp.json``, ``{"servers": {name: {"type": "stdio", ...}}}`` or
  ``{"type": "http", "url", "headers"}`` with the token asked for once through an
  ``inputs`` entry (``${input:docgraph-token}``, stored by VS Code as a secret).

A stdio entry runs this docgraph executable (its absolute path) with the absolute
``--config`` and ``--index`` of the current settings, since a host starts it in a
directory of its own choosing. No token is ever written: HTTP entries name the
``DOCGRAPH_TOKEN`` environment variable (or VS Code's secret input).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docgraph.config import StoreSettings
from docgraph.errors import ConfigError

HOSTS = ("claude-desktop", "claude-code", "cursor", "vscode")
TOKEN_ENV = "DOCGRAPH_TOKEN"
VSCODE_TOKEN_INPUT = "docgraph-token"


@dataclass(frozen=True)
class HostSnippet:
    """What one host needs: the file-shaped ``config``, the file ``--write`` merges it
    into, and what the user still has to do (``note``)."""

    host: str
    config: dict[str, Any]
    path: Path
    note: str


def docgraph_executable() -> list[str]:
    """The command that runs this docgraph: the ``docgraph`` script being run (absolute
    path), else this Python with ``-m docgraph.serve.cli``."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name.startswith("docgraph") and script.is_file():
        return [str(script.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "docgraph.serve.cli"]


def stdio_command(store: StoreSettings, config_file: Path | None,
                  user: str | None = None) -> list[str]:
    """The full stdio command line: executable, absolute ``--config`` (the one in use:
    ``--config``, ``DOCGRAPH_CONFIG`` or ``./docgraph.toml``), absolute ``--index`` for the
    embedded backend, ``mcp`` and ``--user`` when given."""
    command = docgraph_executable()
    chosen = config_file or (Path(os.environ["DOCGRAPH_CONFIG"])
                             if os.environ.get("DOCGRAPH_CONFIG") else Path("docgraph.toml"))
    if chosen.is_file():
        command += ["--config", str(chosen.absolute())]
    if store.backend == "embedded":
        command += ["--index", str(Path(store.path).expanduser().absolute())]
    command.append("mcp")
    if user:
        command += ["--user", user]
    return command


def _config_home() -> Path:
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def host_file(host: str) -> Path:
    """Where ``host`` reads its MCP servers (user-wide for Claude Desktop and Cursor, the
    current project for Claude Code and VS Code)."""
    return {
        "claude-desktop": _config_home() / "Claude" / "claude_desktop_config.json",
        "claude-code": Path(".mcp.json"),
        "cursor": Path.home() / ".cursor" / "mcp.json",
        "vscode": Path(".vscode") / "mcp.json",
    }[_check_host(host)]


def _check_host(host: str) -> str:
    if host not in HOSTS:
        raise ConfigError(f"host {host!r}: must be one of {', '.join(HOSTS)}")
    return host


def host_snippet(host: str, name: str, *, command: list[str] | None = None,
                 http_url: str | None = None) -> HostSnippet:
    """The configuration of ``host`` for a server called ``name``: stdio running
    ``command``, or streamable HTTP at ``http_url`` with a bearer token from the
    environment."""
    _check_host(host)
    if (command is None) == (http_url is None):
        raise ConfigError("give either a stdio command or --http URL")
    if http_url is not None and not http_url.startswith(("http://", "https://")):
        raise ConfigError(f"--http {http_url!r}: must be an http:// or https:// URL")
    path = host_file(host)
    token_note = (f"set {TOKEN_ENV} to a token from `docgraph token add USER` in the "
                  "environment the host starts in")
    if command is not None:
        entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
        if host in ("claude-code", "vscode"):
            entry = {"type": "stdio", **entry}
        key = "servers" if host == "vscode" else "mcpServers"
        note = (f"{path}: restart the host; the server runs as [serve] stdio_user of the "
                "settings (or the --user in args)")
        return HostSnippet(host, {key: {name: entry}}, path, note)
    assert http_url is not None
    if host == "claude-desktop":
        entry = {"command": "npx",
                 "args": ["-y", "mcp-remote", http_url, "--header",
                          "Authorization:${DOCGRAPH_AUTH_HEADER}"],
                 "env": {"DOCGRAPH_AUTH_HEADER": "Bearer <token>"}}
        note = (f"{path}: replace <token> with a token from `docgraph token add USER` "
                "(Claude Desktop's file has no remote entries; mcp-remote, from npm, "
                "bridges stdio to the HTTP server)")
        return HostSnippet(host, {"mcpServers": {name: entry}}, path, note)
    if host == "claude-code":
        entry = {"type": "http", "url": http_url,
                 "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}
        return HostSnippet(host, {"mcpServers": {name: entry}}, path, f"{path}: {token_note}")
    if host == "cursor":
        entry = {"url": http_url, "headers": {"Authorization": f"Bearer ${{env:{TOKEN_ENV}}}"}}
        return HostSnippet(host, {"mcpServers": {name: entry}}, path, f"{path}: {token_note}")
    entry = {"type": "http", "url": http_url,
             "headers": {"Authorization": f"Bearer ${{input:{VSCODE_TOKEN_INPUT}}}"}}
    inputs = [{"type": "promptString", "id": VSCODE_TOKEN_INPUT,
               "description": "docgraph bearer token (docgraph token add USER)",
               "password": True}]
    return HostSnippet(host, {"inputs": inputs, "servers": {name: entry}}, path,
                       f"{path}: VS Code asks for the token once and keeps it as a secret")


def merge_into(snippet: HostSnippet, name: str, path: Path | None = None) -> Path:
    """Merge ``snippet`` into the host's file (or ``path``): the server ``name`` is added
    or replaced, every other server and setting is kept; VS Code inputs are added by id.
    A file that is not a JSON object is refused, naming it, and left untouched."""
    target = path or snippet.path
    current: dict[str, Any] = {}
    if target.exists():
        try:
            loaded = json.loads(target.read_text(encoding="utf-8") or "{}")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"{target}: not readable as JSON ({exc}); print the snippet "
                              "without --write and add it by hand") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{target}: holds no JSON object; not changed")
        current = loaded
    for key, value in snippet.config.items():
        if key == "inputs":
            known = {i.get("id") for i in current.get("inputs", []) if isinstance(i, dict)}
            current["inputs"] = [*current.get("inputs", []),
                                 *(i for i in value if i["id"] not in known)]
            continue
        servers = current.get(key)
        if servers is None:
            servers = current[key] = {}
        if not isinstance(servers, dict):
            raise ConfigError(f"{target}: {key!r} is not a JSON object; not changed")
        servers[name] = value[name]
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".docgraph-tmp")
    temporary.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")
    temporary.replace(target)
    return target
