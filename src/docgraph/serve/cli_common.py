"""What every command of the ``docgraph`` CLI shares: the two consoles (stdout, stderr),
the global options the root callback stores in :data:`state`, opening the index (a read
command never creates one), the governed caller of the read commands, and the option types
used by several command groups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from docgraph.app import DocGraph
from docgraph.errors import RefreshBusy

console = Console()
err = Console(stderr=True)

#: The global options of the root callback (``config``, ``index``, ``user``, ``role``).
state: dict[str, Any] = {}
T = TypeVar("T")


def open_index(*, read: bool = False) -> DocGraph:
    """Open the index of ``--index`` / the settings. ``read``: a read command, which must
    not create an index - a mistyped ``--index`` path is an error naming it (exit 1), and
    nothing is created there."""
    if read:
        _require_index()
    return DocGraph.open(state.get("index"), config_file=state.get("config"))


def _require_index() -> None:
    """Exit 1 naming the path when the embedded index file does not exist."""
    from docgraph.config import load_settings

    settings = load_settings(state.get("config"))
    if settings.store.backend != "embedded":
        return  # a server database: opening it creates no file
    path = Path(state.get("index") or settings.store.path)
    if not path.is_file():
        given = "--index" if state.get("index") else "store.path"
        err.print(f"[red]error:[/] no index at {escape(str(path))} ({given}); nothing was "
                  "created - check the path, or build one with `docgraph index FOLDER`")
        raise typer.Exit(1)


def governed(dg: DocGraph, only: list[str] | None = None) -> tuple[Any, Any]:
    """The governed service and the CLI's caller (read commands go through the same path
    as the MCP tools and the API); ``only`` limits the caller to those namespaces."""
    from docgraph.serve.setup import local_governance

    if not dg.namespaces():
        err.print("the index is empty: run `docgraph index PATH` first")
        raise typer.Exit(1)
    return local_governance(dg, state.get("user"), state.get("role"), only)


def as_builder(refused: str, build: Callable[[], T]) -> T:
    """Run a build (or a removal); when another process leads the index's builds, say
    which and exit 1 (nothing was changed)."""
    try:
        return build()
    except RefreshBusy as exc:
        err.print(f"[yellow]{refused}:[/] {escape(str(exc))}")
        raise typer.Exit(1) from exc


WaitOption = Annotated[
    float, typer.Option("--wait", min=0, help="When another process leads the builds of this "
                        "index (a `serve` or `refresh --watch`), wait up to this many seconds "
                        "for it to stop.")]

NamespaceOption = Annotated[
    list[str] | None,
    typer.Option("--namespace", "-n", help="Limit to these namespaces (default: all)."),
]


def notice(message: str) -> None:
    """Print a notice (e.g. the legacy tokens file imported) on stderr."""
    err.print(f"[yellow]notice:[/] {escape(message)}")
