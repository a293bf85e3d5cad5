"""The CLI's ``backup`` and ``restore`` commands. The embedded index is copied online with
SQLite's backup API and put back with the previous index kept aside
(:mod:`docgraph.store.sqlite.backup`, :mod:`docgraph.store.sqlite.restore`); an index in
PostgreSQL is dumped with ``pg_dump`` and restored with ``pg_restore`` by the operator
(:mod:`docgraph.store.postgres.dump`). Registered on the root app by
:mod:`docgraph.serve.cli`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from docgraph.serve.cli_common import console, err, state


def _store() -> tuple[str, Path, str, bool]:
    """The backend, the embedded index's path, the PostgreSQL URL and ``store.read_only``
    of the settings."""
    from docgraph.config import load_settings

    settings = load_settings(state.get("config")).store
    return (settings.backend, Path(state.get("index") or settings.path), settings.url or "",
            settings.read_only)


def _megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB"


def backup(
    path: Annotated[Path, typer.Argument(help="The new backup file (or a folder to put it "
                                              "in); never overwritten.")],
    pages_per_step: Annotated[int, typer.Option(
        "--pages-per-step", min=1, help="Embedded index: pages copied per step of SQLite's "
        "backup API.")] = 1024,
    pause: Annotated[float, typer.Option(
        "--pause", min=0.0, help="Embedded index: seconds to wait between steps, leaving the "
        "disk to the servers (the copy stays one snapshot).")] = 0.0,
) -> None:
    """Back up the index while servers keep serving and refreshing it: the embedded index
    with SQLite's backup API (one consistent snapshot; the chunk-index cache is left out and
    rebuilt), an index in PostgreSQL with pg_dump --format=custom. The copy is checked
    before this reports it done."""
    backend, index, url, read_only = _store()
    if backend == "postgres":
        from docgraph.store.postgres.dump import dump_database

        dumped = dump_database(url, path)
        console.print(f"dumped database {escape(dumped.database)} ({dumped.tables} tables, "
                      f"{_megabytes(dumped.size_bytes)}) to {escape(str(dumped.path))}; "
                      "checked with pg_restore --list. Restore it with `docgraph restore "
                      f"{escape(str(dumped.path))}` (which prints the steps)")
        return
    from docgraph.store.sqlite.backup import backup_index

    report = backup_index(index, path, pages_per_step=pages_per_step, pause_s=pause,
                          read_only=read_only)
    info = report.info
    console.print(
        f"backed up {escape(str(report.source))} to {escape(str(info.path))}: schema "
        f"{info.schema_version}, {info.documents} documents, {info.chunks} chunks, "
        f"{_megabytes(info.size_bytes)} in {report.steps} steps, {report.seconds:.1f}s; "
        "verified (integrity_check ok). The chunk-index cache is not in it: it is rebuilt "
        "when the restored index is first searched.")


def restore(
    path: Annotated[Path, typer.Argument(help="A backup made by `docgraph backup`.")],
    force: Annotated[bool, typer.Option(
        "--force", help="Replace the index even while a process has it open (restart those "
        "processes afterwards: they keep serving the previous file).")] = False,
) -> None:
    """Make a backup the index of --index / store.path. The backup is checked first; the
    previous index (with its -wal, -shm and chunk-index cache) is moved into a folder
    beside it, and put back if the restored one does not open. Refused while a server has
    the index open, unless --force."""
    backend, index, _, _ = _store()
    if backend == "postgres":
        from docgraph.store.postgres.dump import restore_steps

        err.print("an index in PostgreSQL is restored with PostgreSQL's tools, into a new "
                  "database (docs/operations.md, \"Back up, restore, upgrade\"):")
        for step in restore_steps(path):
            err.print(f"  {escape(step)}")
        raise typer.Exit(1)
    from docgraph.store.sqlite.restore import restore_index

    report = restore_index(path, index, force=force)
    info = report.backup
    console.print(
        f"restored {escape(str(info.path))} (schema {info.schema_version}, {info.documents} "
        f"documents, {info.chunks} chunks) to {escape(str(report.target))}; it opens.")
    if report.previous is not None:
        console.print(f"the previous index is kept in {escape(str(report.previous))}: delete "
                      "it once the restored index serves as it should")
