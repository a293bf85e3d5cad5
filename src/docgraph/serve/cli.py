"""The ``docgraph`` command line: index folders, search, show status, rebuild."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from docgraph.app import DocGraph
from docgraph.errors import DocgraphError
from docgraph.ingest.pipeline import IngestProgress, IngestReport

app = typer.Typer(
    name="docgraph",
    help="Index document folders and answer hybrid (dense + BM25) queries with sources.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)

_state: dict[str, Any] = {}


@app.callback()
def _options(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Settings file (default ./docgraph.toml).")
    ] = None,
    index_path: Annotated[
        Path | None, typer.Option("--index", help="Index file (overrides store.path).")
    ] = None,
) -> None:
    _state["config"] = config
    _state["index"] = index_path


def _open() -> DocGraph:
    return DocGraph.open(_state.get("index"), config_file=_state.get("config"))


def _report_line(report: IngestReport, seconds: float) -> str:
    rate = report.chunks_written / seconds if seconds > 0 else 0.0
    return (
        f"[bold]{report.source.urn}[/] -> namespace [cyan]{report.source.namespace}[/]: "
        f"{len(report.added)} added, {len(report.updated)} updated, {report.unchanged} unchanged, "
        f"{len(report.removed)} removed, {len(report.failed)} failed; "
        f"{report.chunks_written} chunks written ({report.chunks_embedded} embedded, "
        f"{report.chunks_reused} reused) in {seconds:.1f}s ({rate:.0f} chunks/s)"
    )


def _run_build(build: Any) -> list[IngestReport]:
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("docs  {task.fields[chunks]} chunks  {task.fields[rate]:.1f} chunks/s"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("indexing", total=None, chunks=0, rate=0.0)
        started = time.perf_counter()

        def on_progress(p: IngestProgress) -> None:
            elapsed = max(time.perf_counter() - started, 1e-6)
            bar.update(task, total=p.total_files, completed=p.done_files,
                       chunks=p.chunks_written, rate=p.chunks_written / elapsed,
                       description=escape(p.current[-40:]))

        reports: list[IngestReport] = build(on_progress)
    return reports


def _print_reports(reports: list[IngestReport], seconds: float) -> None:
    for report in reports:
        console.print(_report_line(report, seconds))
        for path, reason in report.failed:
            err.print(f"  [yellow]skipped[/] {escape(path)}: {escape(reason)}")


@app.command()
def index(
    path: Annotated[str, typer.Argument(help="Folder to index: a local path or a URN.")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace.")] = "default",
) -> None:
    """Index a folder (incremental: unchanged files are not re-read or re-embedded)."""
    with _open() as dg:
        started = time.perf_counter()
        reports = _run_build(lambda cb: [dg.index(path, namespace, progress=cb)])
        _print_reports(reports, time.perf_counter() - started)


@app.command()
def refresh() -> None:
    """Bring every registered folder up to date."""
    with _open() as dg:
        started = time.perf_counter()
        reports = _run_build(dg.refresh)
        _print_reports(reports, time.perf_counter() - started)


@app.command()
def reindex(
    full: Annotated[
        bool, typer.Option("--full", help="Drop every vector and re-embed all.")
    ] = False,
) -> None:
    """Rebuild the index with the configured embedding model (needs --full)."""
    if not full:
        err.print("reindex re-embeds the whole corpus; confirm with [bold]--full[/]")
        raise typer.Exit(2)
    with _open() as dg:
        err.print("[yellow]re-embedding every document; this takes a while on large corpora[/]")
        started = time.perf_counter()
        reports = _run_build(dg.reindex_full)
        _print_reports(reports, time.perf_counter() - started)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", "--k", help="Number of results.")] = 5,
    mode: Annotated[str, typer.Option("--mode", help="hybrid or dense.")] = "hybrid",
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Limit to these namespaces (default: all)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Search the index; prints ranked chunks with their source and section."""
    with _open() as dg:
        namespaces = namespace or dg.namespaces()
        if not namespaces:
            err.print("the index is empty: run `docgraph index PATH` first")
            raise typer.Exit(1)
        hits = dg.search(query, namespaces=namespaces, k=k, mode=mode)  # type: ignore[arg-type]
    if as_json:
        sys.stdout.write(json.dumps([h.to_dict() for h in hits], indent=2, ensure_ascii=False))
        sys.stdout.write("\n")
        return
    if not hits:
        console.print("no results")
        return
    for hit in hits:
        section = " > ".join(hit.section_path)
        console.print(
            f"[bold]{hit.original_rank}.[/] [green]{escape(hit.source_path)}[/]"
            f"{' > ' + escape(section) if section else ''}  "
            f"[dim]{hit.score_label} {hit.score:.4f} via {'+'.join(hit.lanes)} "
            f"ns={escape(hit.namespace)}[/]"
        )
        text = hit.text if len(hit.text) <= 400 else hit.text[:400].rsplit(" ", 1)[0] + " ..."
        console.print("   " + escape(text).replace("\n", "\n   "))


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the embedding model, per-namespace counts, sources and failed files."""
    with _open() as dg:
        info = dg.status()
    if as_json:
        payload = {
            "path": info.path,
            "embedding_model": info.embedding_model,
            "namespaces": [dataclasses.asdict(ns) for ns in info.namespaces],
            "sources": [{"urn": s.urn, "namespace": s.namespace} for s in info.sources],
            "failures": [{"source": f.source_urn, "path": f.path, "reason": f.reason}
                         for f in info.failures],
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    model = info.embedding_model
    console.print(f"index [bold]{escape(info.path)}[/], model "
                  f"{escape(model[0]) + f' ({model[1]}-d)' if model else '(none yet)'}")
    table = Table("namespace", "sources", "documents", "chunks", "failures", "last indexed")
    for ns in info.namespaces:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns.last_indexed_at)) \
            if ns.last_indexed_at else "never"
        table.add_row(ns.namespace, str(ns.sources), str(ns.documents), str(ns.chunks),
                      str(ns.failures), when)
    console.print(table)
    for f in info.failures:
        err.print(f"[yellow]failed[/] {escape(f.source_urn)}/{escape(f.path)}: {escape(f.reason)}")


def main() -> None:
    """Console-script entry point: clear one-line errors instead of tracebacks."""
    try:
        app()
    except DocgraphError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(1)
