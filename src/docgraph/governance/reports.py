"""Community reports seen through a caller's row rights, rebuilt at query time.

A community report is built over everything in its namespace. When any chunk behind the
community comes from a table row, the report shown to a caller is re-assembled at query time
from the member entities and chunks the caller may see (extractively); if nothing is visible
the report is withheld. No report is rebuilt or re-embedded in the index, and no other
caller's view changes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from itertools import combinations

from docgraph.governance.caller import Caller
from docgraph.governance.rows import RowAuthorizer, check_rows
from docgraph.graph.reports import ReportInput, community_title, extractive_report
from docgraph.model import SearchHit
from docgraph.store.sqlite import SQLiteCatalog
from docgraph.store.sqlite_graph import SQLiteGraphStore

MAX_CHUNKS_PER_MEMBER = 200


def visible_report(
    hit: SearchHit,
    caller: Caller,
    catalog: SQLiteCatalog,
    graph: SQLiteGraphStore,
    authorizer: RowAuthorizer | None,
    sentences: int = 4,
) -> SearchHit | None:
    """The report as ``caller`` may see it: unchanged, re-assembled, or None (withheld)."""
    found = graph.community_by_report(hit.doc_id)
    if found is None:
        return None  # a report whose community is gone is not shown
    _, members = found
    links = graph.chunks_for_entities(members, MAX_CHUNKS_PER_MEMBER)
    chunks = catalog.chunks_by_rowid([rowid for _, rowid, _, _ in links])
    origins = {c.doc_id: c.origin for c in chunks.values() if c.origin is not None}
    if not origins:
        return hit
    decision = check_rows(caller, authorizer, origins)
    if not decision.denied_doc_ids:
        return hit
    visible_chunks = {r: c for r, c in chunks.items() if c.doc_id not in decision.denied_doc_ids}
    members_of: dict[int, set[int]] = {}
    for entity_id, rowid, _, _ in links:
        if rowid in visible_chunks:
            members_of.setdefault(rowid, set()).add(entity_id)
    counts: Counter[int] = Counter(e for ids in members_of.values() for e in ids)
    if not counts:
        return None
    infos = graph.entities_by_id(counts)
    pairs: Counter[tuple[int, int]] = Counter()
    for ids in members_of.values():
        pairs.update(combinations(sorted(ids), 2))
    member_rows = [(infos[e].name, infos[e].type, n, float(n)) for e, n in counts.items()
                   if e in infos]
    relationships = [(infos[a].name, infos[b].name, n) for (a, b), n in pairs.most_common(8)
                     if a in infos and b in infos]
    passages = [visible_chunks[r].text for r, _ in sorted(
        members_of.items(), key=lambda item: (-len(item[1]), item[0]))[:6]]
    text = extractive_report(ReportInput(member_rows, relationships, passages), sentences)
    return replace(hit, text=text, title=community_title(member_rows))
