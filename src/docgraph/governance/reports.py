"""Community reports and titles seen through a caller's row rights and document permissions.

A community's title and report are built over everything in its namespace: member names,
relationships and passages all come from chunks that link a member. When the graph is built,
every table row among those chunks, and every document with a permission set, is recorded
with the community (complete, never sampled); a document whose permission set changes
later updates its records, and is recorded by the communities its chunks feed, in the same
transaction (:meth:`~docgraph.store.base.StoreCatalog.set_document_access`). The rule:

- no recorded row or restricted document, or every one readable by the caller: the stored
  text is shown;
- any hidden: the stored text is never shown; the report (and title) is re-assembled at
  query time, extractively, from member entities and chunks the caller may see, each chunk
  passing the same visibility check; if nothing is visible it is withheld.

No report is rebuilt or re-embedded in the index, and no other caller's view changes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from docgraph.governance.visibility import Visibility, visible_links
from docgraph.graph.reports import (
    CANDIDATE_CHUNKS,
    ReportInput,
    community_title,
    extractive_report,
    specificity,
)
from docgraph.model import SearchHit, StoredChunk
from docgraph.store.graph import CommunityInfo, GraphStore

#: Chunks read per member entity when a report is re-assembled. Only chunks that pass the
#: visibility check are used, so this bounds work, never what may be shown.
CHUNKS_PER_MEMBER = 200


@dataclass(frozen=True, slots=True)
class VisibleCommunity:
    """A community as one caller may see it: the stored title and report, or ones
    re-assembled from visible material (``rebuilt``, then ``members`` names the visible
    members, most mentioned first; else it is empty and the stored members stand).
    ``report`` is None when none was asked for."""

    title: str
    members: tuple[str, ...]
    report: str | None
    rebuilt: bool


def visible_community(community_id: int, members: list[int], stored_title: str,
                      stored_report: str | None, scope: Visibility, graph: GraphStore,
                      sentences: int = 4) -> VisibleCommunity | None:
    """The community as ``scope``'s caller may see it, or None (nothing visible).
    ``stored_report`` None: only the title and members are wanted."""
    restricted = graph.report_access_sources(community_id)
    if all(scope.may_read(access) for access in restricted.values()) and \
            not scope.any_hidden(graph.report_row_sources(community_id).values()):
        return VisibleCommunity(stored_title, (), stored_report, rebuilt=False)
    visible: dict[int, StoredChunk] = {}
    members_of: dict[int, set[int]] = {}
    for entity_id, chunk in visible_links(graph, scope, members, CHUNKS_PER_MEMBER):
        visible[chunk.rowid] = chunk
        members_of.setdefault(chunk.rowid, set()).add(entity_id)
    counts: Counter[int] = Counter(e for ids in members_of.values() for e in ids)
    if not counts:
        return None
    infos = graph.entities_by_id(counts)
    pairs: Counter[tuple[int, int]] = Counter()
    for ids in members_of.values():
        pairs.update(combinations(sorted(ids), 2))
    member_rows = [(infos[e].name, infos[e].type, n, float(n)) for e, n in counts.most_common()
                   if e in infos]
    relationships = [(infos[a].name, infos[b].name, n) for (a, b), n in pairs.most_common(8)
                     if a in infos and b in infos]
    # specificity from visible chunks only: where a member co-occurs with another one, out of
    # its visible mentions (never the namespace-wide counts, which include hidden rows)
    inside: Counter[int] = Counter(e for ids in members_of.values() if len(ids) >= 2
                                   for e in ids)
    specific = {infos[e].name: specificity(inside[e], n) for e, n in counts.items()
                if e in infos}
    report = None
    if stored_report is not None:
        report = extractive_report(_visible_input(member_rows, relationships, specific,
                                                  visible, members_of, graph), sentences)
    return VisibleCommunity(community_title(member_rows, specific=specific),
                            tuple(name for name, _, _, _ in member_rows[:10]), report,
                            rebuilt=True)


def _visible_input(member_rows: list[tuple[str, str, int, float]],
                   relationships: list[tuple[str, str, int]], specific: dict[str, float],
                   visible: dict[int, StoredChunk], members_of: dict[int, set[int]],
                   graph: GraphStore) -> ReportInput:
    """What a re-assembled report is written from: visible chunks only, their stored
    vectors, and their centroid (each weighted by the members it mentions), as at build."""
    rows = [r for r, _ in sorted(members_of.items(), key=lambda item: (-len(item[1]), item[0]))]
    vectors = graph.chunk_vectors(rows)
    centroid = None
    if vectors:
        centroid = np.sum([len(members_of[r]) * np.asarray(vectors[r], dtype=np.float64)
                           for r in rows if r in vectors], axis=0)
    passages = rows[:CANDIDATE_CHUNKS]
    return ReportInput(
        member_rows, relationships, [visible[r].text for r in passages],
        passage_vectors=[vectors[r] for r in passages]
        if all(r in vectors for r in passages) else None,
        centroid=centroid, specificity=specific)


def visible_report(hit: SearchHit, scope: Visibility, graph: GraphStore
                   ) -> SearchHit | None:
    """A community-report hit as ``scope``'s caller may see it: unchanged, re-assembled
    (text, title and section path), or None (withheld)."""
    found = graph.community_by_report(hit.doc_id)
    if found is None:
        return None  # a report whose community is gone is not shown
    community_id, members = found
    seen = visible_community(community_id, members, hit.title, hit.text, scope, graph)
    if seen is None:
        return None
    if not seen.rebuilt or seen.report is None:
        return hit if not seen.rebuilt else None
    return replace(hit, text=seen.report, title=seen.title,
                   section_path=("Community report", seen.title))


def visible_communities(found: list[CommunityInfo], scope: Visibility,
                        graph: GraphStore) -> list[CommunityInfo]:
    """Community listings as ``scope``'s caller may see them (titles and member names
    re-derived from visible material where a hidden row contributed; none left: dropped)."""
    out: list[CommunityInfo] = []
    for community in found:
        members = graph.community_members(community.id)
        seen = visible_community(community.id, members, community.title, None, scope, graph)
        if seen is None:
            scope.dropped += 1
            continue
        out.append(replace(community, title=seen.title,
                           members=seen.members if seen.rebuilt else community.members))
    return out
