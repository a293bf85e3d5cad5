"""GraphRAG-style context assembly: Entities | Relationships | Community Reports | Source Text,
each within its own share of a token budget, plus a rendered text form for agents."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations

from docgraph.budgets import cost
from docgraph.errors import InvalidQuery
from docgraph.limits import MAX_CONTEXT_BUDGET, MIN_CONTEXT_BUDGET
from docgraph.model import page_label
from docgraph.retrieve.cohort import CohortSearcher
from docgraph.retrieve.query_entities import find_query_entities
from docgraph.store.base import require_namespaces

SECTIONS = ("Entities", "Relationships", "Community Reports", "Source Text")
DEFAULT_SHARES = {"Entities": 0.1, "Relationships": 0.15, "Community Reports": 0.25,
                  "Source Text": 0.5}


@dataclass
class GraphContext:
    """Assembled context: rows per section, tokens used per section, and the rendered text."""

    query: str
    token_budget: int
    sections: dict[str, list[str]] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    chunk_ids: list[str] = field(default_factory=list)  # source chunks included
    text: str = ""
    #: Names of the table sources whose row re-check failed during the search (their
    #: rows were left out, fail closed), set by the governed service; empty otherwise.
    unavailable_row_sources: tuple[str, ...] = ()
    #: Chunks of the searched namespaces stored but not embedded yet (a build embeds them
    #: behind its writes: BM25 finds them, the dense lane skips them), set by the governed
    #: service; 0 when every chunk has its vector.
    pending_chunks: int = 0


def assemble_context(
    engine: CohortSearcher,
    query: str,
    *,
    namespaces: Iterable[str],
    token_budget: int = 4000,
    shares: dict[str, float] | None = None,
    k: int = 12,
) -> GraphContext:
    """Build the four sections for ``query`` from what ``namespaces`` hold.

    Each section gets its share of ``token_budget`` (default 10/15/25/50 %); what a section
    leaves unused flows to Source Text. Rows are added whole, in rank order, until the
    section's budget is spent; a row costs its tokens, or a tenth of its characters when
    that is more, so the budget bounds the characters too.
    """
    allowed = require_namespaces(namespaces)
    if (not isinstance(token_budget, int)
            or not MIN_CONTEXT_BUDGET <= token_budget <= MAX_CONTEXT_BUDGET):
        raise InvalidQuery(f"token_budget must be from {MIN_CONTEXT_BUDGET} to "
                           f"{MAX_CONTEXT_BUDGET}, "
                           f"got {token_budget!r}")
    share = dict(DEFAULT_SHARES, **(shares or {}))
    count = engine.embedder.count_tokens
    result = engine.search(query, namespaces=allowed, k=k, mode="vector_first")
    hits = result.hits

    # Entities and relationships come only from the returned chunks (so a governed engine
    # that filtered them also filters these sections); the query's own entities come first.
    graph = engine.graph
    query_entities, _ = find_query_entities(query, engine.extractor, graph, allowed)
    links = graph.entities_of_chunks([h.rowid for h in hits])
    mentions: Counter[int] = Counter()
    pairs: Counter[tuple[int, int]] = Counter()
    for rowid_links in links.values():
        ids = sorted({entity_id for entity_id, _ in rowid_links[:12]})
        mentions.update(ids)
        pairs.update(combinations(ids, 2))
    query_ids = [e.id for e in query_entities if e.id in mentions]
    entity_ids = query_ids + [e for e, _ in mentions.most_common(40) if e not in query_ids]
    infos = graph.entities_by_id(entity_ids)
    entity_rows = [f"{infos[e].name} | {infos[e].type} | in {mentions[e]} of the source chunks"
                   for e in entity_ids if e in infos]
    relationship_rows = [
        f"{infos[a].name} -- {infos[b].name} | together in {n} source chunks"
        for (a, b), n in pairs.most_common(30)
        if a in infos and b in infos and n >= 1
    ]

    reports = engine.search(query, namespaces=allowed, k=5, mode="global").hits
    report_rows = [r.text for r in reports]
    source_rows = [
        f"[{h.chunk_id}] {h.source_path}"
        + (f" > {' > '.join(h.section_path)}" if h.section_path else "")
        + (f" ({page_label(h.pages)})" if h.pages else "") + f"\n{h.text}"
        for h in hits
    ]

    context = GraphContext(query=query, token_budget=token_budget)
    leftover = 0
    for name, rows in (("Entities", entity_rows), ("Relationships", relationship_rows),
                       ("Community Reports", report_rows), ("Source Text", source_rows)):
        budget = int(token_budget * share[name]) + (leftover if name == "Source Text" else 0)
        kept, used = _fit(rows, budget, count)
        context.sections[name] = kept
        context.tokens[name] = used
        leftover += max(0, int(token_budget * share[name]) - used) if name != "Source Text" else 0
    context.chunk_ids = [h.chunk_id for h in hits
                         if any(row.startswith(f"[{h.chunk_id}]")
                                for row in context.sections["Source Text"])]
    context.text = render(context)
    return context


def _fit(rows: list[str], budget: int, count: object) -> tuple[list[str], int]:
    """The rows that fit in ``budget``, in order, each costing its tokens or, when longer
    in characters than those allow, more (:func:`~docgraph.budgets.cost`: a run
    without spaces counts as one token)."""
    kept: list[str] = []
    used = 0
    counted = count(rows) if rows else []  # type: ignore[operator]
    sizes = [cost(n, len(row)) for row, n in zip(rows, counted, strict=True)]
    for row, size in zip(rows, sizes, strict=True):
        if used + size > budget:
            continue
        kept.append(row)
        used += size
    return kept, used


def render(context: GraphContext) -> str:
    """The sections as text, MS-GraphRAG style."""
    parts = []
    for name in SECTIONS:
        rows = context.sections.get(name, [])
        parts.append(f"-----{name}-----")
        parts.extend(rows if rows else ["(none)"])
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"
