"""Which known entities a query names: extractor hits plus word n-grams looked up by key."""

from __future__ import annotations

import re
from collections.abc import Iterable

from docgraph.graph.extract import EntityExtractor
from docgraph.graph.normalize import canonical_key
from docgraph.retrieve.pool import CohortQuery
from docgraph.store.graph import EntityInfo, GraphStore
from docgraph.text import STOPWORDS

_WORDS = re.compile(r"[\w][\w'’.&+-]*[\w]|\w", re.UNICODE)
_WORD = re.compile(r"\w+", re.UNICODE)  # the words a query writes in lower case


def query_entity_keys(
    query: str, extractor: EntityExtractor | None, max_ngram: int = 4
) -> list[str]:
    """Candidate canonical keys named by the query, in order of appearance."""
    keys: list[str] = []
    if extractor is not None:
        keys.extend(link.key for link in sorted(extractor.links(query),
                                                key=lambda link: link.first_position))
    words = _WORDS.findall(query)
    for size in range(max_ngram, 0, -1):
        for start in range(len(words) - size + 1):
            gram = words[start:start + size]
            if size == 1 and (gram[0].casefold() in STOPWORDS or len(gram[0]) < 3):
                continue
            if gram[0].casefold() in STOPWORDS or gram[-1].casefold() in STOPWORDS:
                continue
            text = " ".join(gram)
            keys.append(canonical_key(text))
            keys.append(canonical_key(text, "code"))
    return [k for k in dict.fromkeys(keys) if k]


def find_query_entities(
    query: str,
    extractor: EntityExtractor | None,
    store: GraphStore,
    namespaces: frozenset[str],
) -> tuple[list[EntityInfo], list[str]]:
    """(entities of the namespaces the query names, extractor-found names not in the graph).

    Longer matches win: an entity whose key is contained in a longer matched key (``tern``
    inside ``tern t3``) is dropped.
    """
    keys = query_entity_keys(query, extractor)
    found = store.entities_by_key(keys, namespaces)
    matched = {e.key for e in found}
    kept = [e for e in found
            if not any(e.key != other and f" {e.key} " in f" {other} " for other in matched)]
    order = {k: i for i, k in enumerate(keys)}
    kept.sort(key=lambda e: order.get(e.key, 1 << 30))
    missing: list[str] = []
    if extractor is not None:
        for link in extractor.links(query):
            if link.key not in matched and (
                link.type not in ("name", "acronym") or len(link.name.split()) > 1
            ):
                missing.append(link.name)
    return kept, list(dict.fromkeys(missing))


def cohort_query_entities(q: CohortQuery, extractor: EntityExtractor | None,
                          seed_entities: Iterable[int] = ()
                          ) -> tuple[list[EntityInfo], list[str]]:
    """(entities of the namespaces the query names, extractor-found names not in the
    graph), as :func:`find_query_entities` but through the cohort query's bounded reads and
    without counting every mention of each (``chunk_count`` is capped at the hub limit + 1).
    Longer matches win: an entity whose key is inside a longer matched key is dropped.
    ``seed_entities`` (those the strongest seeds link to) are read in the same statement."""
    keys = query_entity_keys(q.text, extractor)
    ns_ids = list(q.catalog.namespace_ids(sorted(q.allowed)).values())
    # with each one's mentions counted up to the hub limit + 1, in the same statement
    found = q.starting_entities(keys, ns_ids, seed_entities)
    if q.settings.query_names_capitalized:
        # A heuristic proper name is found capitalized in text; a single query word
        # written in lower case only ("place of birth") is the common noun, not it.
        words = _WORD.findall(q.text)
        lower = {canonical_key(w) for w in words if w == w.lower()}
        lower -= {canonical_key(w) for w in words if w != w.lower()}
        found = [e for e in found
                 if not (e.type == "name" and " " not in e.key and e.key in lower)]
    matched = {e.key for e in found}
    kept = [e for e in found
            if not any(e.key != other and f" {e.key} " in f" {other} " for other in matched)]
    order = {key: i for i, key in enumerate(keys)}
    kept.sort(key=lambda e: (order.get(e.key, 1 << 30), e.id))
    missing: list[str] = []
    if extractor is not None:
        for link in extractor.links(q.text):
            if link.key not in matched and (
                link.type not in ("name", "acronym") or len(link.name.split()) > 1
            ):
                missing.append(link.name)
    return kept, list(dict.fromkeys(missing))
