"""The ``docgraph`` command line, assembled: the root group, its global options and every
command and command group, registered here in the order ``--help`` lists them.

The commands live beside this module, by group: :mod:`~docgraph.serve.cli_build` (index,
refresh, reindex, migrate, graph build), :mod:`~docgraph.serve.cli_read` (search, status,
trace, context, lookup, entities, communities, graph neighbors),
:mod:`~docgraph.serve.cli_serve` (serve, mcp), :mod:`~docgraph.serve.cli_agents` (read,
mcp-config), :mod:`~docgraph.serve.cli_sources` (sources, tags) and
:mod:`~docgraph.serve.cli_admin` (admin, token), :mod:`~docgraph.serve.cli_backup`
(backup, restore); what they share is in
:mod:`~docgraph.serve.cli_common`. The console script is :func:`main`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup, TyperOption

from docgraph.errors import DocgraphError
from docgraph.serve import (
    cli_admin,
    cli_agents,
    cli_backup,
    cli_build,
    cli_policy,
    cli_read,
    cli_serve,
    cli_sources,
)
from docgraph.serve.cli_common import err, state


class _DocgraphGroup(TyperGroup):
    """The root command group: flags are shown in ``--help`` without a value placeholder.

    Typer's rich help panel prints an option's type for every option, flags included, so
    each ``--json``, ``--full`` and even ``--help`` read ``<bool>`` as if it took a value
    (the plain formatter skips flags, the rich one does not). A flag's metavar is blanked
    here, once, for every command of the tree; the tree is complete when the root group is
    made (Typer builds the subcommands first)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _blank_flag_metavars(self)


def _blank_flag_metavars(command: Any) -> None:
    """Give every flag of ``command`` and its subcommands (their ``--help`` too) an empty
    metavar, so the help shows no value for it."""
    help_option = command.get_help_option(typer.Context(command))  # made once, cached
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _blank_flag_metavars(sub)


app = typer.Typer(
    cls=_DocgraphGroup,
    name="docgraph",
    help="Index document folders and answer hybrid (dense + BM25) queries with sources.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",  # keeps "[governance]" in help texts (rich markup eats it)
)


def _show_version(value: bool) -> None:
    """``--version``: print the installed package's version and exit."""
    if value:
        from docgraph.version import installed_version

        sys.stdout.write(f"docgraph {installed_version()}\n")
        raise typer.Exit()


@app.callback()
def _options(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Settings file (default ./docgraph.toml).")
    ] = None,
    index_path: Annotated[
        Path | None, typer.Option("--index", help="Index file (overrides store.path).")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Caller of read commands (default "
                                              "serve.stdio_user; needed when [governance] "
                                              "is configured).")
    ] = None,
    role: Annotated[
        str | None, typer.Option("--role", help="Active role of the caller.")
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version,
                           help="Print the version of docgraph and exit.")
    ] = False,
) -> None:
    """Global options of every command."""
    state["config"] = config
    state["index"] = index_path
    state["user"] = user
    state["role"] = role


# Commands, in the order of the root help (Typer lists commands before groups).
app.command()(cli_build.index)
app.command()(cli_build.refresh)
app.command()(cli_build.reindex)
app.command()(cli_build.migrate)
app.command()(cli_backup.backup)
app.command()(cli_backup.restore)
app.command()(cli_read.search)
app.command()(cli_read.status)
app.command()(cli_read.trace)
app.command()(cli_read.context)
app.command()(cli_read.entities)
app.command()(cli_read.communities)
app.command()(cli_read.lookup)
app.command("serve")(cli_serve.serve_http)
app.command("mcp")(cli_serve.mcp_stdio)
app.command("read")(cli_agents.read)
app.command("mcp-config")(cli_agents.mcp_config)

graph_app = typer.Typer(help="Explore the entity graph.", no_args_is_help=True)
graph_app.command("neighbors")(cli_read.graph_neighbors)
graph_app.command("build")(cli_build.graph_build)
app.add_typer(graph_app, name="graph")

sources_app = typer.Typer(
    help="Document folders (kind documents), SQL sources (kind relational) and the table "
    "sources derived from column tags (read-only).", no_args_is_help=True)
sources_app.command("add")(cli_sources.sources_add)
sources_app.command("set")(cli_sources.sources_set)
sources_app.command("remove")(cli_sources.sources_remove)
sources_app.command("list")(cli_sources.sources_list)
sources_app.command("add-sql")(cli_sources.sources_add_sql)
sources_app.command("remove-sql")(cli_sources.sources_remove_sql)
app.add_typer(sources_app, name="sources")

tags_app = typer.Typer(help="Column tags: natural_language (one document per row) and "
                       "`entity:<type>` (live entity vocabulary).", no_args_is_help=True)
tags_app.command("set")(cli_sources.tags_set)
tags_app.command("remove")(cli_sources.tags_remove)
tags_app.command("list")(cli_sources.tags_list)
app.add_typer(tags_app, name="tags")

admin_app = typer.Typer(help="Admin settings: store, loader, index, refresh interval, "
                             "chat model (llm).",
                        no_args_is_help=True)
admin_app.command("show")(cli_admin.admin_show)
admin_app.command("set")(cli_admin.admin_set)
app.add_typer(admin_app, name="admin")

token_app = typer.Typer(help="Bearer tokens of `docgraph serve` (stored as sha256 only).",
                        no_args_is_help=True)
token_app.command("add")(cli_admin.token_add)
token_app.command("list")(cli_admin.token_list)
token_app.command("remove")(cli_admin.token_remove)
app.add_typer(token_app, name="token")

policy_app = typer.Typer(help="The access policy every `docgraph serve` of the index serves.",
                         no_args_is_help=True)
policy_app.command("publish")(cli_policy.policy_publish)
policy_app.command("show")(cli_policy.policy_show)
app.add_typer(policy_app, name="policy")


def main() -> None:
    """Console-script entry point: clear one-line errors instead of tracebacks."""
    try:
        app()
    except DocgraphError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(1)


if __name__ == "__main__":
    main()
