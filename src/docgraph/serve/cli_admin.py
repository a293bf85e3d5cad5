"""The CLI's ``admin`` (settings an admin may change) and ``token`` (bearer tokens of
``docgraph serve``) command groups. Registered on the root app by :mod:`docgraph.serve.cli`."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from docgraph.app import DocGraph
from docgraph.serve.cli_common import console, err, notice, open_index


def admin_show() -> None:
    """Print the admin settings as JSON."""
    with open_index(read=True) as dg:
        view = dg.admin.view()
    sys.stdout.write(json.dumps(view, indent=2) + "\n")


def admin_set(
    assignments: Annotated[list[str], typer.Argument(help="section.key=value ...")],
    full_reindex: Annotated[
        bool, typer.Option("--full-reindex", help="Allow an embed.model change: drops and "
                                                 "re-embeds every chunk.")
    ] = False,
) -> None:
    """Change admin settings (validated, applied, written to the settings file)."""
    changes: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            raise typer.BadParameter(f"{item!r}: use section.key=value")
        changes[key.strip()] = value
    with open_index() as dg:
        result = dg.admin.update(changes, is_admin=True, full_reindex=full_reindex)
    for section, values in result.changed.items():
        for key, value in values.items():
            console.print(f"{section}.{key} = {escape(json.dumps(value))}")
    if not result.changed:
        console.print("nothing changed")
    if result.written_to:
        console.print(f"written to {escape(str(result.written_to))}")
    for note in result.warnings:
        err.print(f"[yellow]warning:[/] {escape(note)}")
    if result.restart_required:
        err.print(f"restart to apply: {', '.join(result.restart_required)}")


def _token_command(command: Any) -> Any:
    """Run ``command(tokens, graph)`` on the bearer tokens of the index's database (the
    legacy tokens file imported first)."""
    from docgraph.serve.setup import open_bearer_tokens

    with open_index() as dg:
        return command(open_bearer_tokens(dg, notice), dg)


def _token_location(dg: DocGraph) -> str:
    if dg.backend == "postgres":
        from docgraph.store.postgres import redacted

        return redacted(dg.settings.store.url or "")
    return str(dg.settings.store.path)


def token_add(
    user: Annotated[str, typer.Argument(help="The user the token authenticates.")],
    role: Annotated[
        str | None, typer.Option("--role", "-r", help="Act only in this role.")
    ] = None,
) -> None:
    """Create a token for USER; prints it once (only its sha256 is stored, in the index's
    database, so every server on that database accepts it at once)."""
    def add(tokens: Any, dg: DocGraph) -> tuple[str, str]:
        return f"{tokens.add(user, role)}\n", _token_location(dg)

    token, where = _token_command(add)
    sys.stdout.write(token)
    err.print(f"token for {escape(user)}{' as ' + escape(role) if role else ''} stored (as its "
              f"sha256) in {escape(where)}; it is not shown again")


def token_list() -> None:
    """Token ids (digest prefixes), users, roles and creation times; never the tokens."""
    table = Table("token id", "user", "role", "created")
    for entry in _token_command(lambda tokens, dg: tokens.entries()):
        table.add_row(entry.token_id, escape(entry.user), escape(entry.role or "-"),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.created_at)))
    console.print(table)


def token_remove(
    token_id: Annotated[str, typer.Argument(help="Token id from `docgraph token list`.")],
) -> None:
    """Revoke the token(s) whose id starts with TOKEN_ID (every server refuses them from its
    next request on)."""
    removed = _token_command(lambda tokens, dg: tokens.remove(token_id))
    console.print(f"removed {removed} token(s)")
    if not removed:
        raise typer.Exit(1)

