"""The pages that read the index as a caller would: the entity graph and its communities,
one document, and the playground that runs an agent tool as a chosen caller - all through
the governed service's operations."""

from __future__ import annotations

from typing import Any

from docgraph.errors import DocgraphError, SourceError
from docgraph.evidence.quality import relevance_level
from docgraph.governance import AccessDenied, Caller
from docgraph.governance.read import encode_read_cursor
from docgraph.limits import MAX_PAGE, MAX_READ_BUDGET
from docgraph.model import lane_of, page_label
from docgraph.serve.console.changes import audit_change
from docgraph.serve.console.ports import ConsoleGovernance
from docgraph.serve.tools import GENERIC_THEMES_QUERY
from docgraph.sources.naming import console_document_url, split_key

#: Characters of a block's text shown in the playground.
EXCERPT_CHARS = 600
#: The tools the playground runs.
PLAYGROUND_TOOLS = ("lookup_knowledge", "search_documents", "explore_topics")
PLAYGROUND_MODES = ("vector_first", "graph_first", "global")


GRAPH_LIMIT = 50


def graph_page(governance: ConsoleGovernance, admin: Caller, query: str | None,
               entity: str | None) -> dict[str, Any]:
    """Entities whose name contains ``query`` (all, by mentions, without one), the
    neighbours of ``entity`` (by weight, strongest first), and the communities, all through
    the governed listings."""
    out: dict[str, Any] = {"query": query or "", "entity": entity or "", "entities": [],
                           "neighbors": [], "communities": [], "error": ""}
    try:
        out["entities"] = governance.entities(admin, query or None, limit=GRAPH_LIMIT)
        if entity:
            out["neighbors"] = sorted(  # strongest first; ties by name
                governance.neighbors(admin, entity, limit=GRAPH_LIMIT),
                key=lambda n: (-n.weight, n.entity.name.casefold()))
        out["communities"] = governance.communities(admin, limit=100)
    except AccessDenied:
        out["error"] = "the index has no namespace yet"
    except DocgraphError as exc:
        out["error"] = str(exc)
    return out


def community_page(governance: ConsoleGovernance, admin: Caller,
                   community_id: int) -> dict[str, Any] | None:
    """One community (members, level, size) and its report, found as ``explore_topics``
    finds reports (the global search, so the report passes the same row checks); None when
    no community in reach has this id."""
    try:
        communities = governance.communities(admin, limit=MAX_PAGE)
    except AccessDenied:
        return None
    found = next((c for c in communities if c.id == community_id), None)
    if found is None:
        return None
    report = None
    if found.report_doc_id:
        hits = governance.retrieve(admin, found.title or " ".join(found.members[:5]),
                                   k=50, mode="global").hits
        report = next((h.text for h in hits if h.doc_id == found.report_doc_id), None)
    return {"community": found, "report": report}


# -- playground ---------------------------------------------------------------------------

def run_playground(governance: ConsoleGovernance, admin: Caller, tool: str, user: str,
                   role: str | None, query: str, k: int = 10,
                   mode: str = "vector_first") -> dict[str, Any]:
    """Run ``tool`` (``explore_topics``: ranked community reports, its query optional) as
    the chosen caller through the governed service (its own audit record
    names that caller) and record who ran it in a ``console:playground`` record.

    Returns the namespaces the caller resolved to and one row per evidence block (lane,
    quality score or engine score, relevance level); a denial is returned as ``error``."""
    if tool not in PLAYGROUND_TOOLS:
        raise SourceError(f"tool: one of {', '.join(PLAYGROUND_TOOLS)}")
    if mode not in PLAYGROUND_MODES:
        raise SourceError(f"mode: one of {', '.join(PLAYGROUND_MODES)}")
    out: dict[str, Any] = {"tool": tool, "user": user, "role": role, "query": query,
                           "namespaces": [], "blocks": [], "error": "",
                           "relevance_level": None, "is_low_quality": None, "trace_id": None}
    detail = f"{tool} as {user}" + (f" ({role})" if role else "")
    try:
        caller = Caller(user, role)
        # The governed operation first, so a denial is audited under the caller as any
        # denied request is; then the namespaces it resolved to, for display.
        if tool == "lookup_knowledge":
            result = governance.lookup(caller, query)
            settings = governance.evidence
            identity = governance.identity()
            out["relevance_level"] = str(result.relevance_level)
            out["is_low_quality"] = result.is_low_quality
            for rank, block in enumerate(result.blocks, 1):
                lanes = [r.removeprefix("lane:") for r in block.hit_reasons
                         if r.startswith("lane:")]
                out["blocks"].append({
                    "rank": rank, "title": block.title,
                    "key": (identity.key(block.namespace, block.evidence_key)
                            if block.namespace and block.doc_id else block.evidence_key),
                    "source": block.source, "namespace": block.namespace,
                    "section": " > ".join(block.section_path),
                    "lane": lane_of(lanes), "lanes": lanes,
                    "quality": round(block.quality_score, 3),
                    "relevance": str(relevance_level(block.quality_score,
                                                     settings.precise_threshold,
                                                     settings.low_quality_threshold)),
                    "text": _excerpt(block.content),
                })
        else:
            if tool == "explore_topics":  # community reports, as the tool ranks them
                query, mode = query or GENERIC_THEMES_QUERY, "global"
                out["query"] = query
            cohort = governance.retrieve(caller, query, k=k, mode=mode,  # type: ignore[arg-type]
                                         return_trace=True)
            if cohort.trace is not None:
                out["trace_id"] = cohort.trace.id
            identity = governance.identity()
            for hit in cohort.hits:
                out["blocks"].append({
                    "rank": hit.original_rank, "title": hit.title,
                    "key": identity.key(hit.namespace, hit.chunk_id),
                    "source": hit.source_path, "namespace": hit.namespace,
                    "section": " > ".join(hit.section_path),
                    "lane": "community report" if tool == "explore_topics" else hit.lane,
                    "lanes": list(hit.shown_lanes),
                    "quality": round(float(hit.score), 4), "relevance": hit.score_label,
                    "text": _excerpt(hit.text),
                })
        out["namespaces"] = sorted(governance.namespaces(caller))
    except AccessDenied as exc:
        out["error"] = f"access denied: {exc}"
    except DocgraphError as exc:
        out["error"] = str(exc)
    for block in out["blocks"]:  # each passage's page in the console (not a report's)
        block["also"] = [lane for lane in block["lanes"]
                         if lane not in block["lane"].split("+")]
        doc, index = split_key(block["key"])
        block["link"] = (console_document_url("", doc, index)
                         if tool != "explore_topics" and index is not None else None)
    audit_change(governance, admin, "playground", "error" if out["error"] else "ok",
                 detail + (f": {out['error']}" if out["error"] else ""))
    return out


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS - 1] + "…"


# -- documents ----------------------------------------------------------------------------

def document_page(governance: ConsoleGovernance, admin: Caller, item_id: str,
                  chunk: int | None = None, cursor: str | None = None) -> dict[str, Any]:
    """One page of a document as the signed-in admin may read it (the governed read, so
    audited as a ``read`` of the admin; rows the admin's row check hides are not shown):
    its chunks in order, each with its anchor (``chunk-N``), agent-visible id, section and
    pages, the page that holds ``chunk`` first (the rest by ``cursor``), and links to the
    pages before and after.

    Raises :class:`~docgraph.errors.NotFound` for an id the admin cannot read (the one
    "not found" of every read) and :class:`~docgraph.errors.InvalidQuery` for a bad
    cursor."""
    doc_part = item_id.strip()
    wanted = doc_part if chunk is None else f"{doc_part}#chunk-{chunk}"
    page = governance.read(admin, wanted, scope="document", token_budget=MAX_READ_BUDGET,
                           cursor=cursor)
    identity = governance.identity()
    public = identity.document(page.namespace, page.doc_id)
    named = identity.source_of(page.namespace, page.doc_id)
    base = console_document_url("", public)

    def link(start: int | None) -> str | None:
        return None if start is None else f"{base}?cursor={encode_read_cursor(start)}"

    return {
        "title": page.title or page.path,
        "document_id": public,
        "namespace": page.namespace,
        "source_name": None if named is None else named.name,
        "path": page.path,
        "url": identity.url(page.namespace, page.doc_id, page.path),
        "target": chunk,
        "total": len(page.span),
        "chunks": [{
            "index": c.index, "anchor": f"chunk-{c.index}",
            "id": identity.key(c.namespace, c.chunk_id),
            "section": " > ".join(c.section_path),
            "pages": page_label(c.pages) if c.pages is not None else "",
            "ocr": c.ocr, "text": c.text, "target": c.index == chunk,
        } for c in page.chunks],
        "previous": link(page.previous_start),
        "next": link(page.next_start),
    }
