"""The ``docgraph`` command line: index folders, search, show status, rebuild."""

from __future__ import annotations

import dataclasses
import errno
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

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
from typer.core import TyperGroup, TyperOption

from docgraph.app import DocGraph
from docgraph.budgets import char_limit, clip
from docgraph.errors import BuildInterrupted, DocgraphError, RefreshBusy
from docgraph.ingest.pipeline import IngestProgress, IngestReport
from docgraph.model import page_label
from docgraph.sources.naming import PublicIdentity


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
console = Console()
err = Console(stderr=True)

_state: dict[str, Any] = {}
T = TypeVar("T")


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
    _state["config"] = config
    _state["index"] = index_path
    _state["user"] = user
    _state["role"] = role


def _open(*, read: bool = False) -> DocGraph:
    """Open the index of ``--index`` / the settings. ``read``: a read command, which must
    not create an index - a mistyped ``--index`` path is an error naming it (exit 1), and
    nothing is created there."""
    if read:
        _require_index()
    return DocGraph.open(_state.get("index"), config_file=_state.get("config"))


def _require_index() -> None:
    """Exit 1 naming the path when the embedded index file does not exist."""
    from docgraph.config import load_settings

    settings = load_settings(_state.get("config"))
    if settings.store.backend != "embedded":
        return  # a server database: opening it creates no file
    path = Path(_state.get("index") or settings.store.path)
    if not path.is_file():
        given = "--index" if _state.get("index") else "store.path"
        err.print(f"[red]error:[/] no index at {escape(str(path))} ({given}); nothing was "
                  "created - check the path, or build one with `docgraph index FOLDER`")
        raise typer.Exit(1)


def _governed(dg: DocGraph, only: list[str] | None = None) -> tuple[Any, Any]:
    """The governed service and the CLI's caller (read commands go through the same path
    as the MCP tools and the API); ``only`` limits the caller to those namespaces."""
    from docgraph.serve.setup import local_governance

    if not dg.namespaces():
        err.print("the index is empty: run `docgraph index PATH` first")
        raise typer.Exit(1)
    return local_governance(dg, _state.get("user"), _state.get("role"), only)


def _report_line(report: IngestReport, seconds: float) -> str:
    rate = report.chunks_written / seconds if seconds > 0 else 0.0
    return (
        f"[bold]{report.source.urn}[/] -> namespace [cyan]{report.source.namespace}[/]: "
        f"{len(report.added)} added, {len(report.updated)} updated, {report.unchanged} unchanged, "
        f"{len(report.removed)} removed, {len(report.failed)} failed"
        + (f", {len(report.vanished)} vanished during the crawl" if report.vanished else "")
        + "; "
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
        not_included = report.not_included_summary()
        if not_included:
            err.print(f"  [yellow]{escape(not_included)}[/]")
        for path, reason in report.failed:
            err.print(f"  [yellow]skipped[/] {escape(path)}: {escape(reason)}")


def _as_builder(refused: str, build: Callable[[], T]) -> T:
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


@app.command()
def index(
    path: Annotated[str, typer.Argument(help="Folder to index: a local path or a URN.")],
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="Namespace.")] = "default",
    wait: WaitOption = 0.0,
) -> None:
    """Index a folder (incremental: unchanged files are not re-read or re-embedded).

    One process at a time builds an index: when another one leads (a `serve` or
    `refresh --watch`), this says which and exits 1, changing nothing. Interrupted (Ctrl-C),
    it keeps the documents it committed and exits 130: the same command continues."""
    with _open() as dg:
        started = time.perf_counter()
        try:
            reports = _as_builder("not indexed", lambda: _run_build(
                lambda cb: [dg.index(path, namespace, progress=cb, wait_seconds=wait)]))
        except BuildInterrupted as exc:  # Ctrl-C: what was committed stays
            err.print(escape(str(exc)))
            raise typer.Exit(130) from None
        _print_reports(reports, time.perf_counter() - started)


@app.command()
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
    with _open() as dg:
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


@app.command()
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

    path = _state.get("index") or load_settings(_state.get("config")).store.path
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


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", "--k", help="Number of results.")] = 5,
    mode: Annotated[
        str,
        typer.Option("--mode", help="hybrid, dense, vector_first, graph_first or global."),
    ] = "hybrid",
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Limit to these namespaces (default: all)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Search the index as the caller; prints ranked chunks with their source and section."""
    with _open(read=True) as dg:
        governance, caller = _governed(dg, namespace)
        hits = governance.search(caller, query, k=k, mode=mode)
        identity = governance.identity()
    if as_json:
        shown = []
        for hit in hits:  # agent-visible ids, as the tools show them
            entry = hit.to_dict()
            entry["text"], cut = clip(hit.text, char_limit(dg.settings.loader.chunk_tokens))
            if cut:  # stored before chunks were bounded in characters, or larger
                entry["truncated"] = True
            entry["chunk_id"] = identity.key(hit.namespace, hit.chunk_id)
            entry["doc_id"] = identity.document(hit.namespace, hit.doc_id)
            url = identity.url(hit.namespace, hit.doc_id, hit.source_path,
                               hit.pages[0] if hit.pages else None)
            if url is not None:
                entry["url"] = url
            shown.append(entry)
        sys.stdout.write(json.dumps(shown, indent=2, ensure_ascii=False))
        sys.stdout.write("\n")
        return
    if not hits:
        console.print("no results")
        return
    for hit in hits:  # the id `docgraph read` and every tool accept, as the tools show it
        section = " > ".join(hit.section_path)
        pages = page_label(hit.pages) + (", OCR" if hit.ocr else "")
        console.print(
            f"[bold]{hit.original_rank}.[/] "
            f"[green]{escape(identity.key(hit.namespace, hit.chunk_id))}[/]"
            f"{' > ' + escape(section) if section else ''}"
            f"{' (' + pages + ')' if hit.pages else ''}  "
            f"[dim]{hit.score_label} {hit.score:.4f} via {'+'.join(hit.shown_lanes)} "
            f"ns={escape(hit.namespace)}[/]", soft_wrap=True
        )
        text = hit.text if len(hit.text) <= 400 else hit.text[:400].rsplit(" ", 1)[0] + " ..."
        console.print("   " + escape(text).replace("\n", "\n   "))


@app.command()
def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the embedding model, which process leads the refresh, and for the caller's
    namespaces their counts, last builds, sources and failed files (as the caller, like the
    index_status tool: with [governance] configured pass --user)."""
    from docgraph.governance.browse import StatusView
    from docgraph.serve.setup import local_governance

    with _open(read=True) as dg:
        path, every = dg.ports.location, f"every {dg.settings.refresh.interval_seconds:g}s"
        if dg.namespaces():
            governance, caller = local_governance(dg, _state.get("user"), _state.get("role"))
            info = governance.index_status(caller)
        else:  # nothing namespaced to show or to hide
            whole = dg.status()
            info = StatusView(whole.embedding_model, dg.settings.refresh.interval_seconds, [],
                              {}, refresh_leader=whole.refresh_leader)
    namespaces = [info.stats[name] for name in sorted(info.stats)]
    if as_json:
        payload = {
            "path": path,
            "embedding_model": info.embedding_model,
            "namespaces": [dataclasses.asdict(ns) for ns in namespaces],
            "sources": [{"urn": s.urn, "namespace": s.namespace} for s in info.sources],
            "failures": [{"source": f.source_urn, "path": f.path, "reason": f.reason}
                         for f in info.failures],
            "builds": [b.to_dict() for b in info.builds],
            "refresh_leader": info.refresh_leader,
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    model = info.embedding_model
    console.print(f"index [bold]{escape(path)}[/], model "
                  f"{escape(model[0]) + f' ({model[1]}-d)' if model else '(none yet)'}")
    console.print("refresh led by " + (f"{escape(info.refresh_leader)} ({every})"
                                       if info.refresh_leader
                                       else "no process (none refreshes on an interval)"))
    table = Table("namespace", "sources", "documents", "chunks", "entities", "communities",
                  "failures", "last indexed")
    for ns in namespaces:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ns.last_indexed_at)) \
            if ns.last_indexed_at else "never"
        table.add_row(ns.namespace, str(ns.sources), str(ns.documents), str(ns.chunks),
                      str(ns.entities), str(ns.communities), str(ns.failures), when)
    console.print(table)
    if info.builds:
        builds = Table("namespace", "last build", "outcome", "stale for", "documents", "chunks",
                       "errors")
        for b in info.builds:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.last_build_at)) \
                if b.last_build_at else "never"
            unbuilt = "building" if b.last_outcome == "running" else "never built"
            stale = unbuilt if b.staleness_seconds is None \
                else f"{b.staleness_seconds:.0f}s" + (" (overdue)" if b.overdue else "")
            builds.add_row(b.namespace, when, b.last_outcome or "-", stale, str(b.documents),
                           str(b.chunks), str(len(b.errors)))
        console.print(builds)
        for b in info.builds:
            if b.in_progress:
                console.print(f"building {escape(b.namespace)}: {escape(b.in_progress)}")
            for p in b.errors:
                err.print(f"[red]{p.outcome}[/] {escape(b.namespace)} {escape(p.source)} "
                          f"{p.phase}: {escape(p.message)}")
    for f in info.failures:
        err.print(f"[yellow]failed[/] {escape(f.source_urn)}/{escape(f.path)}: {escape(f.reason)}")


@app.command()
def trace(
    trace_id: Annotated[str, typer.Argument(help="A trace id, or 'last'.")] = "last",
) -> None:
    """Show a stored retrieval trace (lanes, timings, entities, provenance) as JSON; with
    [governance] configured, only the caller's own (--user)."""
    from docgraph.serve.setup import governance_configured, local_governance

    with _open(read=True) as dg:
        user = None
        if governance_configured(dg.settings.governance):
            user = local_governance(dg, _state.get("user"), _state.get("role"))[1].user_id
        found = dg.traces.get(trace_id, user_id=user)
        identity = PublicIdentity(dg.store.list_sources())
    if found is None:
        err.print(f"no trace {trace_id!r} (traces are kept for the most recent searches)")
        raise typer.Exit(1)
    sys.stdout.write(json.dumps(public_ids(found, identity), indent=2, ensure_ascii=False)
                     + "\n")


@app.command()
def context(
    query: Annotated[str, typer.Argument(help="What the context is for.")],
    budget: Annotated[int, typer.Option("--budget", help="Token budget.")] = 3000,
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Limit to these namespaces (default: all)."),
    ] = None,
) -> None:
    """Print GraphRAG-style context: Entities | Relationships | Community Reports | Source Text."""
    with _open(read=True) as dg:
        governance, caller = _governed(dg, namespace)
        assembled = governance.context(caller, query, token_budget=budget)
        text = governance.identity().cited_keys(assembled.text)
    sys.stdout.write(text)


graph_app = typer.Typer(help="Explore the entity graph.", no_args_is_help=True)
app.add_typer(graph_app, name="graph")

NamespaceOption = Annotated[
    list[str] | None,
    typer.Option("--namespace", "-n", help="Limit to these namespaces (default: all)."),
]


@app.command()
def entities(
    query: Annotated[str | None, typer.Argument(help="Part of an entity name.")] = None,
    namespace: NamespaceOption = None,
    entity_type: Annotated[
        str | None, typer.Option("--type", "-t", help="Entity type, e.g. ticket or code.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="Most entities to list.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List entities (most mentioned first), filtered by name and type."""
    with _open(read=True) as dg:
        governance, caller = _governed(dg, namespace)
        found = governance.entities(caller, query, entity_type, limit)
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(e) for e in found], indent=2,
                                    ensure_ascii=False) + "\n")
        return
    table = Table("entity", "type", "chunks", "namespace")
    for e in found:
        table.add_row(escape(e.name), e.type, str(e.chunk_count), escape(e.namespace))
    console.print(table)


@graph_app.command("neighbors")
def graph_neighbors(
    entity: Annotated[str, typer.Argument(help="Entity name or key, e.g. E-417.")],
    namespace: NamespaceOption = None,
    limit: Annotated[int, typer.Option("--limit", help="Most neighbours to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Entities that co-occur with ENTITY, strongest (NPMI) first."""
    with _open(read=True) as dg:
        governance, caller = _governed(dg, namespace)
        found = governance.neighbors(caller, entity, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(n) for n in found], indent=2,
                                    ensure_ascii=False) + "\n")
        return
    if not found:
        console.print(f"no neighbours for {escape(entity)!r}")
        return
    table = Table("neighbour", "type", "npmi", "shared chunks", "namespace")
    for n in found:
        table.add_row(escape(n.entity.name), n.entity.type, f"{n.weight:.3f}", str(n.chunks),
                      escape(n.entity.namespace))
    console.print(table)


@app.command()
def communities(
    namespace: NamespaceOption = None,
    level: Annotated[int | None, typer.Option("--level", help="Hierarchy level (0 = top).")]
    = None,
    limit: Annotated[int, typer.Option("--limit", help="Most communities to list.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List entity communities (largest first) with their key members."""
    with _open(read=True) as dg:
        governance, caller = _governed(dg, namespace)
        found = governance.communities(caller, level=level, limit=limit)
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(c) for c in found], indent=2,
                                    ensure_ascii=False) + "\n")
        return
    table = Table("level", "size", "title", "members", "namespace")
    for c in found:
        table.add_row(str(c.level), str(c.size), escape(c.title),
                      escape(", ".join(c.members[:6])), escape(c.namespace))
    console.print(table)


@graph_app.command("build")
def graph_build(namespace: NamespaceOption = None, wait: WaitOption = 0.0) -> None:
    """Rebuild the graph, communities and reports (default: namespaces that changed)."""
    with _open() as dg:
        reports = _as_builder("not built",
                              lambda: dg.build_graph(namespace or None, wait_seconds=wait))
    for r in reports:
        console.print(f"[cyan]{escape(r.namespace)}[/]: {r.entities} entities, {r.edges} edges, "
                      f"{r.communities} communities, {r.reports} reports "
                      f"({r.reports_embedded} embedded) in {sum(r.seconds.values()):.1f}s")
    if not reports:
        console.print("graph is up to date")


sources_app = typer.Typer(
    help="Document folders (kind documents), SQL sources (kind relational) and the table "
    "sources derived from column tags (read-only).", no_args_is_help=True)
app.add_typer(sources_app, name="sources")
DomainOption = Annotated[str, typer.Option("--domain", "-d", help="Domain (= namespace).")]


NameOption = Annotated[
    str | None, typer.Option("--name", help="Display name agents see instead of the URN "
                                            "(default: the folder's last path component, "
                                            "unique in the domain).")]
PublicUrlOption = Annotated[
    str | None, typer.Option("--public-url", help="Base URL citations link to (the folder "
                                                  "on the intranet, S3 console, ...); "
                                                  "'{path}' marks where the path goes.")]


@sources_app.command("add")
def sources_add(
    urn: Annotated[str, typer.Argument(help="Folder: local path, file://, s3://, sftp://, "
                                            "ftp:// or hdfs:// URN (no credentials).")],
    domain: DomainOption,
    name: NameOption = None,
    public_url: PublicUrlOption = None,
) -> None:
    """Register a document folder in a domain (indexed by the next `docgraph refresh`)."""
    with _open() as dg:
        record = dg.sources.add_folder(urn, domain, display_name=name, public_url=public_url)
    console.print(f"[bold]{escape(record.urn)}[/] in domain [cyan]{escape(record.namespace)}[/]"
                  f" as [green]{escape(record.display_name or '-')}[/]"
                  + (f" -> {escape(record.public_url)}" if record.public_url else ""))


@sources_app.command("set")
def sources_set(
    urn: Annotated[str, typer.Argument(help="The folder as registered (any spelling).")],
    domain: DomainOption,
    name: NameOption = None,
    public_url: PublicUrlOption = None,
    no_public_url: Annotated[bool, typer.Option("--no-public-url",
                                                help="Remove the public URL.")] = False,
) -> None:
    """Rename a folder as agents see it or change its public URL (ids in the stored URN
    form keep resolving)."""
    with _open() as dg:
        record = dg.sources.update_folder(urn, domain, display_name=name,
                                          public_url=public_url,
                                          clear_public_url=no_public_url)
    console.print(f"[bold]{escape(record.urn)}[/] in domain [cyan]{escape(record.namespace)}[/]"
                  f" as [green]{escape(record.display_name)}[/]"
                  + (f" -> {escape(record.public_url)}" if record.public_url else ""))


@sources_app.command("remove")
def sources_remove(
    urn: Annotated[str, typer.Argument(help="The folder as registered (any spelling).")],
    domain: DomainOption,
    wait: WaitOption = 0.0,
) -> None:
    """Unregister a folder from a domain and delete everything indexed from it (as the
    index's one builder, like `index`)."""
    with _open() as dg:
        removed = _as_builder("not removed",
                              lambda: dg.remove_folder(urn, domain, wait_seconds=wait))
    console.print(f"removed; {removed} document(s) deleted")


@sources_app.command("list")
def sources_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
                 ) -> None:
    """Every source: folders, SQL sources and derived (read-only) table sources."""
    with _open(read=True) as dg:
        found = dg.sources.list()
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(s) for s in found], indent=2) + "\n")
        return
    table = Table("kind", "type", "urn", "domain", "name", "public url", "read-only",
                  "credentials from")
    for s in found:
        table.add_row(s.kind, s.type, escape(s.urn), escape(s.domain or "-"),
                      escape(s.display_name or ""), escape(s.public_url or ""),
                      "yes" if s.read_only else "", escape((s.credential_env or "") + "*"
                                                           if s.credential_env else ""))
    console.print(table)


@sources_app.command("add-sql")
def sources_add_sql(
    name: Annotated[str, typer.Argument(help="Name of the SQL source, e.g. crm.")],
    url: Annotated[str, typer.Argument(help="SQLAlchemy URL; the password is not stored.")],
) -> None:
    """Register a SQL database whose columns can be tagged (kind relational)."""
    with _open() as dg:
        source = dg.sources.add_sql_source(name, url)
    console.print(f"[bold]{escape(source.name)}[/] = {escape(source.url)}; credentials from "
                  f"{source.credential_env}* or the secrets file")


@sources_app.command("remove-sql")
def sources_remove_sql(name: Annotated[str, typer.Argument(help="SQL source name.")],
                       wait: WaitOption = 0.0) -> None:
    """Unregister a SQL source, its tags and the documents derived from them (as the
    index's one builder, like `index`)."""
    with _open() as dg:
        removed = _as_builder("not removed",
                              lambda: dg.sources.remove_sql_source(name, wait_seconds=wait))
    console.print(f"removed; {removed} document(s) deleted")


tags_app = typer.Typer(help="Column tags: natural_language (one document per row) and "
                       "`entity:<type>` (live entity vocabulary).", no_args_is_help=True)
app.add_typer(tags_app, name="tags")


def _column(spec: str) -> tuple[str | None, str, str]:
    parts = spec.split(".")
    if len(parts) == 2:
        return None, parts[0], parts[1]
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise typer.BadParameter(f"{spec!r}: use [schema.]table.column")


@tags_app.command("set")
def tags_set(
    source: Annotated[str, typer.Argument(help="SQL source name.")],
    column: Annotated[str, typer.Argument(help="[schema.]table.column")],
    tag: Annotated[str, typer.Argument(help="natural_language or `entity:<type>`")],
    domain: Annotated[
        str | None, typer.Option("--domain", "-d", help="Domain of natural_language rows.")
    ] = None,
) -> None:
    """Tag a column (checked against the database now)."""
    schema, table, name = _column(column)
    with _open() as dg:
        found = dg.sources.set_tag(source, table, name, tag, schema=schema, domain=domain)
    console.print(f"{escape(found.label())} tagged {found.tag}"
                  + (f" in domain {escape(found.domain)}" if found.domain else ""))


@tags_app.command("remove")
def tags_remove(
    source: Annotated[str, typer.Argument(help="SQL source name.")],
    column: Annotated[str, typer.Argument(help="[schema.]table.column")],
    tag: Annotated[str, typer.Argument(help="natural_language or `entity:<type>`")],
    domain: Annotated[str | None, typer.Option("--domain", "-d", help="Domain.")] = None,
    wait: WaitOption = 0.0,
) -> None:
    """Remove a tag; removing natural_language deletes its row documents (as the index's
    one builder, like `index`)."""
    schema, table, name = _column(column)
    with _open() as dg:
        removed = _as_builder("not removed", lambda: dg.sources.remove_tag(
            source, table, name, tag, schema=schema, domain=domain, wait_seconds=wait))
    console.print(f"removed; {removed} document(s) deleted")


@tags_app.command("list")
def tags_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
              ) -> None:
    """Every column tag."""
    with _open(read=True) as dg:
        found = dg.sources.tags()
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(t) for t in found], indent=2) + "\n")
        return
    table = Table("source", "column", "tag", "domain", "primary key")
    for t in found:
        table.add_row(escape(t.source), escape(f"{t.schema}.{t.table}.{t.column}"), t.tag,
                      escape(t.domain or "-"), escape(t.pk_column or "-"))
    console.print(table)


admin_app = typer.Typer(help="Admin settings: store, loader, index, refresh interval, "
                             "chat model (llm).",
                        no_args_is_help=True)
app.add_typer(admin_app, name="admin")


@admin_app.command("show")
def admin_show() -> None:
    """Print the admin settings as JSON."""
    with _open(read=True) as dg:
        view = dg.admin.view()
    sys.stdout.write(json.dumps(view, indent=2) + "\n")


@admin_app.command("set")
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
    with _open() as dg:
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


def main() -> None:
    """Console-script entry point: clear one-line errors instead of tracebacks."""
    try:
        app()
    except DocgraphError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        sys.exit(1)


@app.command()
def lookup(
    query: Annotated[str, typer.Argument(help="The question, as an agent would ask it.")],
    trace: Annotated[
        bool, typer.Option("--trace", help="Add the internal trace under \"trace\".")
    ] = False,
) -> None:
    """Agent-facing evidence lookup as the caller (the lookup_knowledge tool's path); prints
    the projected JSON."""
    with _open(read=True) as dg:
        governance, caller = _governed(dg)
        result = governance.lookup(caller, query)
        identity = governance.identity()
    payload = result.to_dict()
    if trace:
        payload["trace"] = public_ids(result.trace.to_dict(), identity)
    sys.stdout.write(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")


#: Keys of trace dicts whose values are stored ids (lists, or keys of a mapping).
_ID_FIELDS = frozenset({"evidence_key", "doc_id", "chunk_id"})
_ID_LISTS = frozenset({"candidates", "final_provenance"})


def public_ids(value: Any, identity: PublicIdentity, key: str = "") -> Any:
    """``value`` (a trace as JSON) with every stored chunk or document id in its
    agent-visible form, as the rest of the CLI shows ids: the values of ``evidence_key``,
    ``doc_id`` and ``chunk_id`` fields and the ids of a retrieval trace's ``candidates``
    (per lane) and ``final_provenance``."""
    if isinstance(value, dict):
        if key in _ID_LISTS:
            if key == "final_provenance":
                return {identity.key_anywhere(str(k)): v for k, v in value.items()}
            return {lane: [identity.key_anywhere(str(i)) for i in ids] if isinstance(ids, list)
                    else ids for lane, ids in value.items()}
        return {k: public_ids(v, identity, k) for k, v in value.items()}
    if isinstance(value, list):  # a list of dicts is no id list: its items map alone
        return [public_ids(v, identity, "" if isinstance(v, dict) else key) for v in value]
    if key in _ID_FIELDS and isinstance(value, str):
        return identity.key_anywhere(value)
    return value



@app.command("serve")
def serve_http(
    host: Annotated[
        str | None, typer.Option("--host", help="Interface to bind (default serve.host, "
                                              "127.0.0.1).")
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port (default serve.port, 8765).")
    ] = None,
) -> None:
    """Serve MCP (streamable HTTP at /mcp), the JSON API (/api/v1, /openapi.json) and the
    web console (/console).

    Every request needs a bearer token (`docgraph token add USER`); callers see only their
    entitled namespaces (governance.policy_file or governance.sql_url). With
    refresh.in_serve (the default) it also refreshes every namespace each
    refresh.interval_seconds while it leads: of several servers on one index exactly one
    does, and another takes over when it stops or dies."""
    from docgraph.serve.http import bind_socket, serve
    from docgraph.serve.setup import build_tools, open_bearer_tokens

    _log_to_stderr()  # before the MCP server is built: it configures logging when none is
    with _open() as dg:
        settings = dg.settings.serve
        tokens = open_bearer_tokens(dg, _notice)
        if not tokens.entries():
            err.print("no bearer tokens in the index database: create one with "
                      "[bold]docgraph token add USER[/]")
            raise typer.Exit(1)
        refresh = dg.settings.refresh
        bind = host or settings.host
        bind_port = settings.port if port is None else port
        try:
            sock = bind_socket(bind, bind_port)
        except OSError as exc:
            err.print(f"[red]error:[/] cannot listen on port {bind_port} of {escape(bind)}: "
                      f"{escape(exc.strerror or str(exc))}"
                      + (" (another server, perhaps a docgraph serve, is using it)"
                         if exc.errno == errno.EADDRINUSE else "")
                      + f"; stop it or pick another port with [bold]--port[/] "
                      f"(e.g. --port {bind_port + 1})")
            raise typer.Exit(1) from exc
        tools = build_tools(dg)
        # console links in results (search/fetch `url`): [serve] public_url, else this bind
        tools.governance.base_url = settings.base_url(bind, bind_port)
        if bind not in ("127.0.0.1", "localhost", "::1"):
            err.print(f"[yellow]warning:[/] binding {escape(bind)} makes the server reachable "
                      "from the network; put TLS in front of it")
        base = f"http://{escape(f'[{bind}]' if ':' in bind else bind)}:{bind_port}"
        err.print(f"MCP at {base}/mcp, JSON API at {base}/api/v1 (OpenAPI: /openapi.json), "
                  f"console at {base}/console; Ctrl-C stops")
        if refresh.in_serve:
            err.print(f"refreshing every {refresh.interval_seconds:g}s while this process "
                      "leads the index's builds (one process does; refresh.in_serve = false "
                      "turns this off)")
        serve(tools, tokens, host=bind, port=bind_port, sock=sock,
              refresher=dg.refresher if refresh.in_serve else None)


def _log_to_stderr() -> None:
    """Show docgraph's log records of INFO and above (the refresher's leadership changes,
    rounds and failures, the server's errors) on stderr, each once, unless logging is set
    up already.

    The handler goes on the root logger, not on ``docgraph``'s: the MCP server, when it is
    built, configures the root logger (``logging.basicConfig`` with a rich handler) unless
    that has a handler, and a handler on ``docgraph``'s logger besides one on the root
    printed every record twice. The root keeps its level (WARNING unless set otherwise), so
    other libraries stay quiet."""
    import logging

    logger, root = logging.getLogger("docgraph"), logging.getLogger()
    if logger.handlers or root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    logger.setLevel(logging.INFO)


@app.command("mcp")
def mcp_stdio(
    user: Annotated[
        str | None, typer.Option("--user", help="Caller (default serve.stdio_user).")
    ] = None,
    role: Annotated[
        str | None, typer.Option("--role", help="Active role (default serve.stdio_role).")
    ] = None,
) -> None:
    """Serve MCP over stdin/stdout as the configured caller (for agent hosts that spawn it).

    Without [governance] the index owner is the caller and reads everything, as with the
    read commands; with it the caller is --user or serve.stdio_user, and a caller without
    role assignments is warned about on stderr at start-up. It never refreshes the index:
    agent hosts start one per session and end it with the session, so builds belong to a
    long-running `serve` or `refresh --watch`."""
    import anyio

    from docgraph.serve.mcp import run_stdio
    from docgraph.serve.setup import caller_warnings, stdio_governance
    from docgraph.serve.tools import DocgraphTools

    with _open(read=True) as dg:  # an agent host's typo must not create an empty index
        governance, caller = stdio_governance(dg, user or _state.get("user"),
                                              role or _state.get("role"))
        for warning in caller_warnings(dg, governance, caller):
            err.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        anyio.run(run_stdio, DocgraphTools(governance), caller)


token_app = typer.Typer(help="Bearer tokens of `docgraph serve` (stored as sha256 only).",
                        no_args_is_help=True)
app.add_typer(token_app, name="token")


def _notice(message: str) -> None:
    err.print(f"[yellow]notice:[/] {escape(message)}")


def _token_command(command: Any) -> Any:
    """Run ``command(tokens, graph)`` on the bearer tokens of the index's database (the
    legacy tokens file imported first)."""
    from docgraph.serve.setup import open_bearer_tokens

    with _open() as dg:
        return command(open_bearer_tokens(dg, _notice), dg)


def _token_location(dg: DocGraph) -> str:
    if dg.backend == "postgres":
        from docgraph.store.postgres import redacted

        return redacted(dg.settings.store.url or "")
    return str(dg.settings.store.path)


@token_app.command("add")
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


@token_app.command("list")
def token_list() -> None:
    """Token ids (digest prefixes), users, roles and creation times; never the tokens."""
    table = Table("token id", "user", "role", "created")
    for entry in _token_command(lambda tokens, dg: tokens.entries()):
        table.add_row(entry.token_id, escape(entry.user), escape(entry.role or "-"),
                      time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(entry.created_at)))
    console.print(table)


@token_app.command("remove")
def token_remove(
    token_id: Annotated[str, typer.Argument(help="Token id from `docgraph token list`.")],
) -> None:
    """Revoke the token(s) whose id starts with TOKEN_ID (every server refuses them from its
    next request on)."""
    removed = _token_command(lambda tokens, dg: tokens.remove(token_id))
    console.print(f"removed {removed} token(s)")
    if not removed:
        raise typer.Exit(1)


# Commands for connecting agents (read by id, host configuration) live in their own module;
# importing it registers them on ``app``.
from docgraph.serve import cli_agents  # noqa: E402, F401

if __name__ == "__main__":
    # Run the imported module's app: the one cli_agents registered its commands on.
    from docgraph.serve.cli import main as registered_main

    registered_main()
