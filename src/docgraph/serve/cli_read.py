"""The CLI's read commands, run as the caller through the governed service (the MCP
tools' path): ``search``, ``status``, ``trace``, ``context``, ``lookup``, ``entities``,
``communities`` and ``graph neighbors``, and :func:`public_ids` for the traces they print.
Registered on the root app by :mod:`docgraph.serve.cli`."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from docgraph.budgets import char_limit, clip
from docgraph.model import page_label
from docgraph.serve.cli_common import (
    NamespaceOption,
    console,
    err,
    governed,
    open_index,
    state,
)
from docgraph.sources.naming import PublicIdentity


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
    with open_index(read=True) as dg:
        governance, caller = governed(dg, namespace)
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


def status(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Show the embedding model, which process leads the refresh, and for the caller's
    namespaces their counts, last builds, sources and failed files (as the caller, like the
    index_status tool: with [governance] configured pass --user)."""
    from docgraph.governance.browse import StatusView
    from docgraph.serve.setup import local_governance

    with open_index(read=True) as dg:
        path, every = dg.ports.location, f"every {dg.settings.refresh.interval_seconds:g}s"
        if dg.namespaces():
            governance, caller = local_governance(dg, state.get("user"), state.get("role"))
            info = governance.index_status(caller)
        else:  # nothing namespaced to show or to hide
            whole = dg.status()
            info = StatusView(whole.embedding_model, dg.settings.refresh.interval_seconds, [],
                              {}, refresh_leader=whole.refresh_leader,
                              replicas=whole.replicas)
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
            "replicas": [dataclasses.asdict(r) for r in info.replicas],
        }
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    model = info.embedding_model
    console.print(f"index [bold]{escape(path)}[/], model "
                  f"{escape(model[0]) + f' ({model[1]}-d)' if model else '(none yet)'}")
    console.print("refresh led by " + (f"{escape(info.refresh_leader)} ({every})"
                                       if info.refresh_leader
                                       else "no process (none refreshes on an interval)"))
    for replica in info.replicas:
        console.print(f"read replica {escape(replica.url)}: " + (
            f"[red]unreachable[/] ({escape(replica.error)})" if replica.error else
            f"{replica.lag_bytes if replica.lag_bytes is not None else '?'} bytes behind"
            + ("" if replica.standby else " (promoted: no longer a standby)")))
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
            if b.pending_chunks:
                console.print(f"{escape(b.namespace)}: {b.pending_chunks} chunks awaiting "
                              "embeddings (found by keyword until they are embedded)")
            for p in b.errors:
                err.print(f"[red]{p.outcome}[/] {escape(b.namespace)} {escape(p.source)} "
                          f"{p.phase}: {escape(p.message)}")
    for f in info.failures:
        err.print(f"[yellow]failed[/] {escape(f.source_urn)}/{escape(f.path)}: {escape(f.reason)}")


def trace(
    trace_id: Annotated[str, typer.Argument(help="A trace id, or 'last'.")] = "last",
) -> None:
    """Show a stored retrieval trace (lanes, timings, entities, provenance) as JSON; with
    [governance] configured, only the caller's own (--user)."""
    from docgraph.serve.setup import governance_configured, local_governance

    with open_index(read=True) as dg:
        user = None
        if governance_configured(dg.settings.governance):
            user = local_governance(dg, state.get("user"), state.get("role"))[1].user_id
        found = dg.traces.get(trace_id, user_id=user)
        identity = PublicIdentity(dg.store.list_sources())
    if found is None:
        err.print(f"no trace {trace_id!r} (traces are kept for the most recent searches)")
        raise typer.Exit(1)
    sys.stdout.write(json.dumps(public_ids(found, identity), indent=2, ensure_ascii=False)
                     + "\n")


def context(
    query: Annotated[str, typer.Argument(help="What the context is for.")],
    budget: Annotated[int, typer.Option("--budget", help="Token budget.")] = 3000,
    namespace: Annotated[
        list[str] | None,
        typer.Option("--namespace", "-n", help="Limit to these namespaces (default: all)."),
    ] = None,
) -> None:
    """Print GraphRAG-style context: Entities | Relationships | Community Reports | Source Text."""
    with open_index(read=True) as dg:
        governance, caller = governed(dg, namespace)
        assembled = governance.context(caller, query, token_budget=budget)
        text = governance.identity().cited_keys(assembled.text)
    sys.stdout.write(text)


def lookup(
    query: Annotated[str, typer.Argument(help="The question, as an agent would ask it.")],
    trace: Annotated[
        bool, typer.Option("--trace", help="Add the internal trace under \"trace\".")
    ] = False,
) -> None:
    """Agent-facing evidence lookup as the caller (the lookup_knowledge tool's path); prints
    the projected JSON."""
    with open_index(read=True) as dg:
        governance, caller = governed(dg)
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
    with open_index(read=True) as dg:
        governance, caller = governed(dg, namespace)
        found = governance.entities(caller, query, entity_type, limit)
    if as_json:
        sys.stdout.write(json.dumps([dataclasses.asdict(e) for e in found], indent=2,
                                    ensure_ascii=False) + "\n")
        return
    table = Table("entity", "type", "chunks", "namespace")
    for e in found:
        table.add_row(escape(e.name), e.type, str(e.chunk_count), escape(e.namespace))
    console.print(table)


def graph_neighbors(
    entity: Annotated[str, typer.Argument(help="Entity name or key, e.g. E-417.")],
    namespace: NamespaceOption = None,
    limit: Annotated[int, typer.Option("--limit", help="Most neighbours to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Entities that co-occur with ENTITY, strongest (NPMI) first."""
    with open_index(read=True) as dg:
        governance, caller = governed(dg, namespace)
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


def communities(
    namespace: NamespaceOption = None,
    level: Annotated[int | None, typer.Option("--level", help="Hierarchy level (0 = top).")]
    = None,
    limit: Annotated[int, typer.Option("--limit", help="Most communities to list.")] = 30,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List entity communities (largest first) with their key members."""
    with open_index(read=True) as dg:
        governance, caller = governed(dg, namespace)
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

