"""The entity lane: chunks sharing a (non-hub) entity with the query or the strongest seeds,
gated by similarity to the query; among them the *hops*.

Hops (multi-hop questions). A seed is *anchored* when it introduces an entity the query names:
its document's title is named by the query, or it names a query entity within its first
``hop_intro_position`` characters. A chunk of another document that introduces an entity such
an anchored seed mentions (the document titled by the entity, or a chunk opening with it) is a
*hop* of that seed: the second passage of "where was the director of film X born?". The most
query-similar hop of each anchored seed (at least ``hop_min_ratio`` times the seed's
similarity) is ranked just behind its seed (:func:`docgraph.retrieve.fusion.inherit_hops`),
and only an introducing chunk covers a bridge entity (the seed itself mentions it). A query
that names no entity makes no hop, so single-hop retrieval keeps its hybrid ranking.
"""

from __future__ import annotations

import re
import time

from docgraph.graph.normalize import canonical_key
from docgraph.retrieve.cohort_settings import CohortSettings
from docgraph.retrieve.lanes.base import ENTITY
from docgraph.retrieve.pool import CohortQuery, Hop
from docgraph.text import STOPWORDS

_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")
_WORD = re.compile(r"\w+", re.UNICODE)


def _title_key(title: str) -> str:
    """Canonical key of a document title without a trailing disambiguation, ``Rex Ingram
    (director)`` -> ``rex ingram``: the entity a document titled so is about."""
    return canonical_key(_DISAMBIGUATION.sub("", title or ""))


def _tokens(text: str) -> list[str]:
    """Word tokens, each canonicalized on its own (case, possessive, plural)."""
    return [canonical_key(w) for w in _WORD.findall(text)]


def _names(query_tokens: list[str], title: str) -> bool:
    """Whether the query names the title (its tokens as a contiguous run; a title of
    stopwords only names nothing)."""
    words = _tokens(_DISAMBIGUATION.sub("", title or ""))
    if not words or all(w in STOPWORDS for w in words):
        return False
    n = len(words)
    return any(query_tokens[i:i + n] == words for i in range(len(query_tokens) - n + 1))


class EntityLane:
    """Chunks sharing an entity with the query or the strongest seeds, and the hops of the
    anchored seeds (left on ``q.hops`` by row id, pool members or not)."""

    name = ENTITY
    needs_entities = True

    def enabled(self, settings: CohortSettings) -> bool:
        return settings.entity_lane

    def run(self, q: CohortQuery) -> None:
        t = time.perf_counter()
        s = q.settings
        entities = q.non_hub(q.query_ids + q.seed_entities)
        links = q.capped_chunks(entities, s.chunks_per_entity)
        via: dict[int, int] = {}
        for entity_id, rowid, _, _ in links:
            via.setdefault(rowid, entity_id)
        hops = hops_of(q.query_ids, q.sources, q) if s.hop_inherit else {}
        chosen = q.gated([r for _, r, _, _ in links], s.entity_min_similarity, s.entity_budget)
        # Hops are admitted beyond the budget (still gated by similarity).
        extra = q.gated([r for r in hops if r not in chosen], s.entity_min_similarity,
                        len(hops))
        for rowid in [*chosen, *extra]:
            hop = hops.get(rowid)
            reason = (f"introduces entity {hop.entity} of seed {hop.source}" if hop
                      else f"shares entity {via[rowid]}")
            q.admit(rowid, ENTITY, reason)
        q.trace.add(ENTITY, [str(r) for r in [*chosen, *extra]])
        q.trace.timings_ms[ENTITY] = (time.perf_counter() - t) * 1000
        q.hops = hops


def hops_of(query_ids: list[int], sources: list[int], q: CohortQuery) -> dict[int, Hop]:
    """Chunks of other documents introducing an entity of an anchored seed."""
    s = q.settings
    links = q.links_of(sources)
    docs = {r: (p.document, p.title) for r, p in q.chunk_places(sources).items()}
    query_tokens = _tokens(q.text)
    wanted = set(query_ids)
    entity_source: dict[int, int] = {}
    for position, rowid in enumerate(sources):
        anchored = (_names(query_tokens, docs.get(rowid, (0, ""))[1])
                    or any(e in wanted and first <= s.hop_intro_position
                           for e, _, first in links[rowid]))
        if not anchored:
            continue
        bridges = q.non_hub(e for e, _, _ in links[rowid] if e not in wanted)
        for e in bridges[: s.entities_per_seed]:
            entity_source.setdefault(e, position)
    if not entity_source:
        return {}
    candidates = [x for x in q.capped_chunks(entity_source, s.chunks_per_entity)
                  if x[1] not in set(sources)]
    if not candidates:
        return {}
    keys = q.entity_keys(entity_source)
    docs.update((r, (p.document, p.title))
                for r, p in q.chunk_places(x[1] for x in candidates).items())
    hops: dict[int, Hop] = {}
    for entity_id, rowid, _, first in candidates:
        position = entity_source[entity_id]
        document, title = docs.get(rowid, (0, ""))
        if document == docs.get(sources[position], (-1, ""))[0]:
            continue  # the seed's own document: the structural lane's business
        if first > s.hop_intro_position and _title_key(title) != keys.get(entity_id):
            continue  # mentions the entity, does not introduce it
        known = hops.get(rowid)
        if known is None or position < known.source_position:
            hops[rowid] = Hop(sources[position], position, entity_id)
    return hops
