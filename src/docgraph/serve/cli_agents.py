"""``docgraph read`` and ``docgraph mcp-config``: the commands that connect agents.

Registered on the main :data:`docgraph.serve.cli.app` when that module is imported.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from docgraph.serve.cli import _governed, _open, _state, app, console, err


@app.command("read")
def read(
    item_id: Annotated[str, typer.Argument(help="A chunk id (docId#chunk-N) or document id, "
                                                "as search or lookup printed it.")],
    scope: Annotated[str, typer.Option("--scope", help="chunk, section or document (for a "
                                                       "chunk id).")] = "section",
    budget: Annotated[int, typer.Option("--budget", help="Tokens per page.")] = 2000,
    cursor: Annotated[str | None, typer.Option("--cursor", help="next_cursor of the "
                                                                "previous page.")] = None,
) -> None:
    """Read a chunk with its section, or a whole document, as the caller (the read_document
    tool's path); prints JSON."""
    from docgraph.serve.agent_tools import read_payload

    with _open(read=True) as dg:
        governance, caller = _governed(dg)
        page = governance.read(caller, item_id, scope=scope,
                               token_budget=budget, cursor=cursor)
        payload = read_payload(item_id.strip(), page, governance.identity())
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


@app.command("mcp-config")
def mcp_config(
    host: Annotated[str, typer.Argument(help="claude-desktop, claude-code, cursor or vscode.")],
    http: Annotated[str | None, typer.Option("--http", help="URL of a running `docgraph "
                                                            "serve` (default: stdio).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Merge into the host's config file "
                                                        "instead of printing.")] = False,
    name: Annotated[str, typer.Option("--name", help="Server name in the host.")] = "docgraph",
    file: Annotated[Path | None, typer.Option("--file", help="Config file to merge into "
                                                             "(default: the host's).")] = None,
) -> None:
    """Print (or merge into the host's file with --write) the configuration that connects
    an agent host to this index: stdio (this executable, --config, --index) or --http."""
    from docgraph.serve.host_config import host_snippet, merge_into, stdio_command

    command = None
    if http is None:
        with _open() as dg:
            user = _state.get("user")
            if not (user or dg.settings.serve.stdio_user):
                err.print("notice: no [serve] stdio_user is set: the snippet runs as "
                          "--user USER (replace it, or pass docgraph --user NAME mcp-config)")
                user = "USER"
            command = stdio_command(dg.settings.store, _state.get("config"), user)
    snippet = host_snippet(host, name, command=command, http_url=http)
    if not write:
        sys.stdout.write(json.dumps(snippet.config, indent=2) + "\n")
        err.print(escape(snippet.note))
        return
    path = merge_into(snippet, name, file)
    console.print(f"wrote server [bold]{escape(name)}[/] into {escape(str(path))}")
    err.print(escape(snippet.note))
