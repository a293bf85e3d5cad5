"""``docgraph read`` and ``docgraph mcp-config``: the commands that connect agents.

Registered on the root app by :mod:`docgraph.serve.cli`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from docgraph.serve.cli_common import console, err, governed, open_index, state


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

    with open_index(read=True) as dg:
        governance, caller = governed(dg)
        page = governance.read(caller, item_id, scope=scope,
                               token_budget=budget, cursor=cursor)
        payload = read_payload(item_id.strip(), page, governance.identity())
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


def mcp_config(
    host: Annotated[str, typer.Argument(help="claude-desktop, claude-code, cursor or vscode.")],
    http: Annotated[str | None, typer.Option("--http", help="URL of a running `docgraph "
                                                            "serve` (default: stdio).")] = None,
    write: Annotated[bool, typer.Option("--write", help="Merge into the host's config file "
                                                        "instead of printing.")] = False,
    name: Annotated[str, typer.Option("--name", help="Server name in the host.")] = "docgraph",
    oauth: Annotated[bool, typer.Option("--oauth", help="The host signs in through the "
                                                        "identity provider (auth.issuer): "
                                                        "the URL only, no token (default "
                                                        "URL: serve.public_url + /mcp).")
                     ] = False,
    file: Annotated[Path | None, typer.Option("--file", help="Config file to merge into "
                                                             "(default: the host's).")] = None,
) -> None:
    """Print (or merge into the host's file with --write) the configuration that connects
    an agent host to this index: stdio (this executable, --config, --index), --http with
    a bearer token from the environment, or --oauth (the URL only: hosts that speak the MCP
    authorization spec sign the user in at the identity provider).

    A stdio snippet is checked first by running the server's start-up as the host will
    (settings file, index, governance, caller); when it would not start, nothing is printed
    or written and the problems are named (exit 1)."""
    from docgraph.serve.host_config import (
        check_stdio_launch,
        host_file,
        host_snippet,
        merge_into,
    )

    command, runs_as = None, ""
    if oauth and http is None:
        from docgraph.config import load_settings

        http = load_settings(state.get("config")).serve.base_url() + "/mcp"
    if http is None:
        host_file(host)  # an unknown host is refused before anything is opened
        check = check_stdio_launch(state.get("config"), state.get("index"),
                                   state.get("user"), state.get("role"))
        for warning in check.warnings:
            err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        if check.problems:
            for problem in check.problems:
                err.print(f"[red]error:[/] {escape(problem)}", soft_wrap=True)
            err.print(f"the {escape(host)} snippet would not start; nothing "
                      f"{'written' if write else 'printed'}")
            raise typer.Exit(1)
        command, runs_as = check.command, check.runs_as
    snippet = host_snippet(host, name, command=command, http_url=http, oauth=oauth)
    note = escape(snippet.note) + (f"; it runs as {escape(runs_as)}" if runs_as else "")
    if not write:
        sys.stdout.write(json.dumps(snippet.config, indent=2) + "\n")
        err.print(note, soft_wrap=True)
        return
    path = merge_into(snippet, name, file)
    console.print(f"wrote server [bold]{escape(name)}[/] into {escape(str(path))}")
    err.print(note, soft_wrap=True)
