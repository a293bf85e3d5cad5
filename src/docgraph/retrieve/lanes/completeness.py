"""Completeness: every entity the query names is represented in the pool. Not a lane of its
own: what it adds counts as the entity lane's. It also reports which named entities were
found (the trace's ``completeness``, ``lookup_knowledge``'s ``unmatched_entities``)."""

from __future__ import annotations

import time

from docgraph.retrieve.lanes.base import ENTITY
from docgraph.retrieve.pool import CohortQuery
from docgraph.store.graph import EntityInfo

# Chunks added per entity the pool lacks (the most query-similar of 4x as many of its
# strongest). Not a setting: they only have to represent the entity, and no bench has varied
# the number (switching completeness off changed no figure on tune, tune_cohort.json).
_COMPLETENESS_PER_ENTITY = 3


def complete(query_entities: list[EntityInfo], unknown: list[str], q: CohortQuery) -> None:
    """Make sure each entity the query names is represented in the pool; search for each
    name in ``unknown`` (named by the query, unknown to the graph)."""
    t = time.perf_counter()
    trace = q.trace
    present = q.links_of(list(q.pool))
    in_pool = {e for r in q.pool for e, _, _ in present.get(r, [])}
    for entity in query_entities:
        if entity.id in in_pool:
            trace.completeness[entity.name] = "in cohort"
            continue
        links = q.read_capped_chunks([entity.id], 4 * _COMPLETENESS_PER_ENTITY)
        chosen = q.gated([r for _, r, _, _ in links], -1.0, _COMPLETENESS_PER_ENTITY)
        for rowid in chosen:
            q.admit(rowid, ENTITY, f"completeness: {entity.name}")
        trace.add(ENTITY, [str(r) for r in chosen])
        trace.completeness[entity.name] = "entity lookup" if chosen else "not found"
    for name in unknown:  # named by the query, unknown to the graph: search for it
        rows = q.index.lexical_search(name, 4 * _COMPLETENESS_PER_ENTITY, q.allowed)
        texts = q.catalog.chunks_by_rowid([r.rowid for r in rows])
        folded = name.casefold()
        containing = [r.rowid for r in rows
                      if r.rowid in texts and folded in texts[r.rowid].text.casefold()]
        fresh = [r for r in containing if r not in q.pool][:_COMPLETENESS_PER_ENTITY]
        for rowid in fresh:
            q.admit(rowid, ENTITY, f"completeness search: {name}")
        trace.add(ENTITY, [str(r) for r in fresh])
        trace.completeness[name] = "per-entity search" if containing else "not found"
    trace.query_entities_found = [n for n, how in trace.completeness.items()
                                  if how != "not found"]
    trace.query_entities_missing = [n for n, how in trace.completeness.items()
                                    if how == "not found"]
    trace.timings_ms["completeness"] = (time.perf_counter() - t) * 1000
