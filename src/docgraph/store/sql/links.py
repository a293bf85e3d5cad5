"""The chunk-entity link upsert, written once for SQLite and PostgreSQL: what the document
write (:mod:`docgraph.store.sql.documents`) and the graph store's link replace
(:meth:`docgraph.store.sql.graph.SqlGraphStore.replace_links`) run inside their transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from docgraph.model import EntityLink
from docgraph.store.sql.dialect import Dialect, marks

_BATCH = 500  # keys per IN list


def write_links(dialect: Dialect, db: Any, ns_id: int,
                links: Sequence[tuple[int, EntityLink]]) -> None:
    """Upsert the entities of (chunk row id, link) pairs, in order, and link them (inside
    the caller's transaction). A typed entity name (vocabulary, pattern) wins over a
    heuristic one (name, acronym), which wins over a key phrase, whatever the write order."""
    if not links:
        return
    dialect.executemany(
        db,
        "INSERT INTO entities(namespace_id, key, name, type) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (namespace_id, key) DO UPDATE SET type = excluded.type,"
        " name = excluded.name WHERE (entities.type IN ('name', 'acronym', 'phrase')"
        " AND excluded.type NOT IN ('name', 'acronym', 'phrase'))"
        " OR (entities.type = 'phrase' AND excluded.type IN ('name', 'acronym'))",
        [(ns_id, link.key, link.name, link.type) for link in _entity_rows(links)],
    )
    keys = list(dict.fromkeys(link.key for _, link in links))
    ids: dict[str, int] = {}
    for start in range(0, len(keys), _BATCH):
        part = keys[start:start + _BATCH]
        ids.update((str(k), int(i)) for k, i in db.execute(dialect.sql(
            f"SELECT key, id FROM entities WHERE namespace_id = ? AND key IN ({marks(len(part))})"
        ), [ns_id, *part]).fetchall())
    dialect.executemany(
        db,
        "INSERT INTO chunk_entities(chunk_id, entity_id, frequency, first_position, score)"
        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (chunk_id, entity_id) DO UPDATE SET"
        " frequency = excluded.frequency, first_position = excluded.first_position,"
        " score = excluded.score",
        [(rowid, ids[link.key], link.frequency, link.first_position, link.score)
         for rowid, link in links],
    )


def _type_rank(entity_type: str) -> int:
    """Precedence of an entity type in :func:`write_links`' upsert (higher wins)."""
    return 0 if entity_type == "phrase" else 1 if entity_type in ("name", "acronym") else 2


def _entity_rows(links: Sequence[tuple[int, EntityLink]]) -> list[EntityLink]:
    """One link per entity key, in order of first appearance: the first of the highest
    precedence, which is what upserting every link in order would leave (a later row only
    replaces one of lower precedence), with one row per entity instead of one per link."""
    best: dict[str, EntityLink] = {}
    for _, link in links:
        found = best.get(link.key)
        if found is None or _type_rank(link.type) > _type_rank(found.type):
            best[link.key] = link
    return list(best.values())
