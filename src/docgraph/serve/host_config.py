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
directory of its own choosing. Before a stdio snippet is printed or written,
:func:`check_stdio_launch` runs the server's start-up as the host will (no ``DOCGRAPH_*``
variables, the snippet's files) and names what would stop it. No token is ever written:
HTTP entries name the ``DOCGRAPH_TOKEN`` environment variable (or VS Code's secret input).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
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


def snippet_config_file(config_file: Path | None) -> Path | None:
    """The settings file a stdio snippet names (absolute): the one in use (``--config``,
    ``DOCGRAPH_CONFIG`` or ``./docgraph.toml``) when it exists, else None."""
    chosen = config_file or (Path(os.environ["DOCGRAPH_CONFIG"])
                             if os.environ.get("DOCGRAPH_CONFIG") else Path("docgraph.toml"))
    return chosen.absolute() if chosen.is_file() else None


def snippet_index(store: StoreSettings) -> Path | None:
    """The index file a stdio snippet names (absolute) for the embedded backend, else None."""
    return Path(store.path).expanduser().absolute() if store.backend == "embedded" else None


def stdio_command(store: StoreSettings, config_file: Path | None,
                  user: str | None = None, role: str | None = None) -> list[str]:
    """The full stdio command line: executable, absolute ``--config`` (the one in use:
    ``--config``, ``DOCGRAPH_CONFIG`` or ``./docgraph.toml``), absolute ``--index`` for the
    embedded backend, ``mcp`` and ``--user`` / ``--role`` when given."""
    command = docgraph_executable()
    chosen = snippet_config_file(config_file)
    if chosen is not None:
        command += ["--config", str(chosen)]
    index = snippet_index(store)
    if index is not None:
        command += ["--index", str(index)]
    command.append("mcp")
    if user:
        command += ["--user", user]
    if role:
        command += ["--role", role]
    return command


@dataclass(frozen=True)
class LaunchCheck:
    """Whether a stdio snippet would start: its ``command``, the ``problems`` that would
    stop it (or make it serve what it should not) and ``warnings`` about what it will do."""

    command: list[str]
    problems: list[str]
    warnings: list[str]
    runs_as: str = ""


@contextmanager
def _host_environment(absent_config: Path) -> Iterator[list[str]]:
    """The environment of an agent host for the time of the block: no ``DOCGRAPH_*``
    variable (hosts start servers with their own environment, not this shell's), and no
    settings file besides the ``--config`` of the snippet. Yields the names removed."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("DOCGRAPH_")}
    for key in saved:
        del os.environ[key]
    os.environ["DOCGRAPH_CONFIG"] = str(absent_config)
    try:
        yield sorted(k for k in saved if k != "DOCGRAPH_CONFIG")
    finally:
        os.environ.pop("DOCGRAPH_CONFIG", None)
        os.environ.update(saved)


def check_stdio_launch(config_file: Path | None, index: Path | None,
                       user: str | None = None, role: str | None = None) -> LaunchCheck:
    """Run what ``docgraph mcp`` of the stdio snippet will run at start-up, as the host
    will start it (the snippet's absolute ``--config`` and ``--index``, no ``DOCGRAPH_*``
    variables): load the settings, open the index, resolve the caller and build the
    governance. Each step that fails is a problem naming what is missing."""
    import tempfile

    from docgraph.app import DocGraph
    from docgraph.config import load_settings
    from docgraph.errors import DocgraphError
    from docgraph.serve.setup import caller_warnings, governance_configured, stdio_governance

    try:
        current = load_settings(config_file)
    except ConfigError as exc:
        return LaunchCheck([], [str(exc)], [])
    if index is not None:
        current.store.path = Path(index)
    command = stdio_command(current.store, config_file, user, role)
    chosen, index_file = snippet_config_file(config_file), snippet_index(current.store)
    if index_file is not None and not index_file.is_file():
        return LaunchCheck(command, [f"no index at {index_file}: run `docgraph index FOLDER "
                                     "--namespace NAME` first (or pass --index)"], [])
    problems: list[str] = []
    warnings: list[str] = []
    runs_as = ""
    with tempfile.TemporaryDirectory() as scratch, \
            _host_environment(Path(scratch) / "absent.toml") as dropped:
        if dropped:
            warnings.append(f"the host does not pass on {', '.join(dropped)} from this "
                            "shell: the server uses the settings file and defaults instead")
        try:
            graph = DocGraph.open(index_file, config_file=chosen)
        except Exception as exc:  # settings, a database that is no index, a server down
            return LaunchCheck(command, [f"the server cannot open the index: {exc}"], warnings)
        try:
            host = graph.settings
            if governance_configured(current.governance) \
                    and not governance_configured(host.governance):
                problems.append(
                    "[governance] comes from DOCGRAPH_GOVERNANCE__* variables of this shell, "
                    "which the host does not pass on: the server would serve every "
                    "namespace to the index owner; put [governance] in the settings file "
                    "(--config)")
            if not graph.namespaces():
                problems.append(f"the index {index_file or host.store.url} is empty: run "
                                "`docgraph index FOLDER --namespace NAME` first")
            if governance_configured(host.governance) and not (user or host.serve.stdio_user):
                problems.append(
                    "[governance] is configured and no caller is known: pass `docgraph "
                    "--user NAME mcp-config ...` or set [serve] stdio_user in the settings "
                    "file")
            else:
                governance, caller = stdio_governance(graph, user, role)
                warnings += caller_warnings(graph, governance, caller)
                runs_as = (f"user {caller.user_id!r}"
                           + (f" in role {caller.active_role!r}" if caller.active_role else "")
                           if governance_configured(host.governance) else
                           "the index owner (no [governance]: every namespace and row)")
        except Exception as exc:  # what would stop the server: named, never a traceback
            problems.append(str(exc) if isinstance(exc, DocgraphError)
                            else f"{type(exc).__name__}: {exc}")
        finally:
            graph.close()
    return LaunchCheck(command, problems, warnings, runs_as)


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
                 http_url: str | None = None, oauth: bool = False) -> HostSnippet:
    """The configuration of ``host`` for a server called ``name``: stdio running
    ``command``, or streamable HTTP at ``http_url`` with a bearer token from the
    environment, or (``oauth``) at ``http_url`` alone: the host finds the identity provider
    through the server's 401 and signs the user in (:func:`oauth_snippet`)."""
    _check_host(host)
    if (command is None) == (http_url is None):
        raise ConfigError("give either a stdio command or --http URL")
    if http_url is not None and not http_url.startswith(("http://", "https://")):
        raise ConfigError(f"--http {http_url!r}: must be an http:// or https:// URL")
    path = host_file(host)
    if oauth:
        if http_url is None:
            raise ConfigError("an OAuth snippet needs the server's URL (--http)")
        return oauth_snippet(host, name, http_url, path)
    token_note = (f"set {TOKEN_ENV} to a token from `docgraph token add USER` in the "
                  "environment the host starts in")
    if command is not None:
        entry: dict[str, Any] = {"command": command[0], "args": command[1:]}
        if host in ("claude-code", "vscode"):
            entry = {"type": "stdio", **entry}
        key = "servers" if host == "vscode" else "mcpServers"
        note = f"{path}: restart the host to start the server"
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


def oauth_snippet(host: str, name: str, http_url: str, path: Path) -> HostSnippet:
    """The entry of a host that speaks the MCP authorization spec: the URL only, no token
    and no header. The host meets the 401, reads the server's Protected Resource Metadata,
    signs the user in at the identity provider and sends its access tokens (Claude
    Desktop through ``mcp-remote``, which does the same sign-in in the browser)."""
    note = (f"{path}: the host signs you in through your identity provider the first "
            "time it connects; no token to set")
    if host == "claude-desktop":
        entry: dict[str, Any] = {"command": "npx", "args": ["-y", "mcp-remote", http_url]}
        return HostSnippet(host, {"mcpServers": {name: entry}}, path, note)
    entry = {"url": http_url} if host == "cursor" else {"type": "http", "url": http_url}
    return HostSnippet(host, {"servers" if host == "vscode" else "mcpServers": {name: entry}},
                       path, note)


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
