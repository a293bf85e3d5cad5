"""The CLI's build commands: ``index``, ``refresh`` (once or ``--watch``), ``reindex``,
``migrate`` and ``graph build``, with the progress bar and the per-source report lines they
print. Registered on the root app by :mod:`docgraph.serve.cli`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from docgraph.app import DocGraph
from docgraph.errors import BuildInterrupted, RefreshBusy
from docgraph.ingest.pipeline import IngestProgress, IngestReport
from docgraph.serve.cli_common import (
    NamespaceOption,
    WaitOption,
    as_builder,
    console,
    err,
    open_index,
    state,
)


def _report_line(report: IngestReport, seconds: float) -> str:
    rate = report.chunks_written / seconds if seconds > 0 else 0.0
    return (
        f"[bold]{report.source.urn}[/] -> namespace [cyan]{report.source.namespace}[/]: "
        f"{len(report.added)} added, {len(report.updated)} updated, {report.unchanged} unchanged, "
        f"{len(report.removed)} removed, {len(report.failed)} failed"
        + (f", {len(report.vanished)} vanished during the crawl" if report.vanished else "")
        + (f", {report.access_changed} with new permissions (not re-embedded)"
           if report.access_changed else "")
        + "; "
        f"{report.chunks_written} chunks written ({report.chunks_embedded} embedded, "
        f"{report.chunks_reused} reused) in {seconds:.1f}s ({rate:.0f} chunks/s)"
        + (f"; {earlier} chunks an interrupted build left unembedded now embedded"
           if (earlier := report.pending_filled - report.chunks_embedded) > 0 else "")
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
        not_included = report.not_included_summary()
        if not_included:
            err.print(f"  [yellow]{escape(not_included)}[/]")
        for path, reason in report.failed:
            err.print(f"  [yellow]skipped[/] {escape(path)}: {escape(reason)}")


def index(
    path: Annotated[str, typer.Argument(help="Folder to index: a local path or a URN.")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace.")] = "default",
    wait: WaitOption = 0.0,
) -> None:
    """Index a folder (incremental: unchanged files are not re-read or re-embedded).

    One process at a time builds an index: when another one leads (a `serve` or
    `refresh --watch`), this says which and exits 1, changing nothing. Interrupted (Ctrl-C),
    it keeps the documents it committed and exits 130: the same command continues."""
    with open_index() as dg:
        started = time.perf_counter()
        try:
            reports = as_builder("not indexed", lambda: _run_build(
                lambda cb: [dg.index(path, namespace, progress=cb, wait_seconds=wait)]))
        except BuildInterrupted as exc:  # Ctrl-C: what was committed stays
            err.print(escape(str(exc)))
            raise typer.Exit(130) from None
        _print_reports(reports, time.perf_counter() - started)


def refresh(
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep refreshing every refresh.interval_seconds "
                                          "until interrupted.")
    ] = False,
    wait: WaitOption = 0.0,
) -> None:
    """Bring every registered source up to date; failed phases are listed (exit code 1).

    One process at a time refreshes an index: when another one leads (a `serve` or
    `refresh --watch`), this says which and exits 1 instead of building concurrently."""
    with open_index() as dg:
        if watch:
            _watch(dg)
            return
        started = time.perf_counter()
        results: list[Any] = []

        def build(cb: Any) -> list[IngestReport]:
            results.append(dg.refresher.run_once(cb, wait_seconds=wait))
            return list(results[-1].reports)

        try:
            reports = _run_build(build)
        except RefreshBusy as exc:
            err.print(f"[yellow]not refreshed:[/] {escape(str(exc))}")
            raise typer.Exit(1) from exc
        except BuildInterrupted as exc:  # Ctrl-C: what was committed stays
            err.print(escape(str(exc)))
            raise typer.Exit(130) from None
        _print_reports(reports, time.perf_counter() - started)
        failed = _print_build_errors(results[0].builds)
    if failed:
        raise typer.Exit(1)


def _print_build_errors(builds: list[Any]) -> bool:
    failed = False
    for build in builds:
        for phase in build.phases:
            if phase.outcome in ("error", "partial"):
                failed = failed or phase.outcome == "error"
                colour = "red" if phase.outcome == "error" else "yellow"
                err.print(f"[{colour}]{phase.outcome}[/] {escape(build.namespace)} "
                          f"{escape(phase.source)} {phase.phase}: {escape(phase.message)}")
    return failed


def _watch(dg: DocGraph) -> None:
    refresher = dg.refresher
    err.print(f"refreshing every {refresher.interval_seconds:.0f}s; Ctrl-C stops")
    refresher.start()
    seen = 0
    told: str | None = None
    try:
        while refresher.running:
            time.sleep(0.5)
            leader = None if refresher.leading else refresher.leader()
            if leader is not None and leader != told:
                err.print(f"the refresh is led by {escape(leader)}; taking over when it stops")
            told = leader
            if refresher.runs != seen and refresher.last_result is not None:
                seen = refresher.runs
                result = refresher.last_result
                changed = sum(b.documents_changed for b in result.builds)
                console.print(f"{time.strftime('%H:%M:%S')} refreshed {len(result.builds)} "
                              f"namespace(s), {changed} document(s) changed")
                _print_build_errors(result.builds)
    except KeyboardInterrupt:
        err.print("stopping after the namespace being built ...")
    finally:
        refresher.stop()


def reindex(
    full: Annotated[
        bool, typer.Option("--full", help="Drop every vector and re-embed all.")
    ] = False,
) -> None:
    """Rebuild the index with the configured embedding model (needs --full)."""
    if not full:
        err.print("reindex re-embeds the whole corpus; confirm with [bold]--full[/]")
        raise typer.Exit(2)
    with open_index() as dg:
        err.print("[yellow]re-embedding every document; this takes a while on large corpora[/]")
        started = time.perf_counter()
        try:
            reports = _run_build(dg.reindex_full)
        except RefreshBusy as exc:
            err.print(f"[yellow]not re-indexed (nothing was dropped):[/] {escape(str(exc))}")
            raise typer.Exit(1) from exc
        except BuildInterrupted as exc:  # the vectors are dropped: refresh embeds the rest
            err.print(f"interrupted: {exc.kept} documents re-embedded and kept; run "
                      "`docgraph refresh` to re-embed the rest (`reindex --full` would start "
                      "over)")
            raise typer.Exit(130) from None
        _print_reports(reports, time.perf_counter() - started)


def migrate(
    to: Annotated[str, typer.Option(
        "--to", help="PostgreSQL URL of an empty database (postgresql://user@host/db; the "
        "password from PGPASSWORD or ~/.pgpass).")],
) -> None:
    """Copy the embedded index (sources, documents, chunks with their vectors, embedding
    model, entity graph and community reports, SQL sources, column tags, build history) into
    PostgreSQL without re-embedding; then set store.backend = "postgres"."""
    from docgraph.config import load_settings
    from docgraph.store.migrate import migrate_to_postgres
    from docgraph.store.postgres import PostgresCatalog
    from docgraph.store.sqlite import SQLiteCatalog

    path = state.get("index") or load_settings(state.get("config")).store.path
    if not Path(path).is_file():
        err.print(f"no embedded index at {escape(str(path))}")
        raise typer.Exit(1)
    started = time.perf_counter()
    source, target = SQLiteCatalog(path), PostgresCatalog(to)
    try:
        report = migrate_to_postgres(source, target)
    finally:
        source.close()
        target.close()
    console.print(
        f"copied {report.sources} sources, {report.documents} documents, {report.chunks} "
        f"chunks ({report.model[0]}, {report.model[1]}-d vectors, none re-embedded), "
        f"{report.entities} entities, {report.communities} communities ({report.reports} "
        f"reports), {report.failures} failures, {report.sql_sources} SQL sources, "
        f"{report.column_tags} column tags, {report.builds} build records and "
        f"{report.tokens} bearer token digest(s) to "
        f"{escape(target.display_url)} in "
        f"{time.perf_counter() - started:.1f}s"
    )
    console.print(escape(f'next: in [store] set backend = "postgres" and '
                         f'url = "{target.display_url}"'))


def graph_build(namespace: NamespaceOption = None, wait: WaitOption = 0.0) -> None:
    """Rebuild the graph, communities and reports (default: namespaces that changed)."""
    with open_index() as dg:
        reports = as_builder("not built",
                              lambda: dg.build_graph(namespace or None, wait_seconds=wait))
    for r in reports:
        console.print(f"[cyan]{escape(r.namespace)}[/]: {r.entities} entities, {r.edges} edges, "
                      f"{r.communities} communities, {r.reports} reports "
                      f"({r.reports_embedded} embedded) in {sum(r.seconds.values()):.1f}s")
    if not reports:
        console.print("graph is up to date")

