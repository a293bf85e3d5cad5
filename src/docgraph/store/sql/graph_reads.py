"""The graph store's reads, written once for SQLite and PostgreSQL: entities, neighbours,
communities and their reports, the id-independent signatures builds are compared by, and
the bounded reads the cohort lanes make per query.

:class:`SqlGraphReads` is the base of :class:`docgraph.store.sql.graph.SqlGraphStore`, which
holds the build side (links, the one-transaction graph replace) and the backend hooks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from docgraph.model import RowOrigin
from docgraph.store.base import require_namespaces
from docgraph.store.graph import (
    CappedEntity,
    CommunityInfo,
    EntityInfo,
    Link,
    Neighbor,
)
from docgraph.store.sql.dialect import Dialect, marks

if TYPE_CHECKING:
    from docgraph.store.sql.graph import GraphBackend, SqlCatalog

_BATCH = 500  # ids per IN list
# Per-entity reads per UNION ALL statement (SQLite allows 500 members in a compound SELECT).
_CAPPED_BATCH = 100
# An entity's mentions counted up to a cap (its ``?``, the cap + 1) by the outer row ``e``.
_CAPPED_COUNT = ("(SELECT count(*) FROM (SELECT 1 FROM chunk_entities ce"
                 " WHERE ce.entity_id = e.id LIMIT ?) capped)")


class SqlGraphReads:
    """The read queries of the :class:`~docgraph.store.graph.GraphStore` port on a
    relational catalog."""

    _catalog: SqlCatalog
    backend: GraphBackend
    dialect: Dialect

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self._catalog.connection().execute(self.dialect.sql(text),
                                                       params).fetchall())

    def _batched(self, text: str, ids: Sequence[Any], before: Sequence[Any] = ()
                 ) -> Iterable[Any]:
        """Rows of ``text`` (its ``{marks}`` an IN list) for ``ids`` in batches."""
        for start in range(0, len(ids), _BATCH):
            part = list(ids[start:start + _BATCH])
            yield from self._rows(text.format(marks=marks(len(part))), [*before, *part])

    def entities_by_id(self, ids: Iterable[int]) -> dict[int, EntityInfo]:
        """Entities (with chunk counts) by internal id."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        return {int(r[0]): EntityInfo(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]),
                                      int(r[5]))
                for r in self._batched(
                    "SELECT e.id, e.key, e.name, e.type, n.name,"
                    " (SELECT count(*) FROM chunk_entities ce WHERE ce.entity_id = e.id)"
                    " FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
                    " WHERE e.id IN ({marks})", wanted)}

    # -- queries -------------------------------------------------------------------

    def find_entities(
        self,
        namespaces: Iterable[str],
        query: str | None = None,
        entity_type: str | None = None,
        limit: int = 50,
    ) -> list[EntityInfo]:
        """Entities of ``namespaces`` (most mentioned first), optionally filtered by a
        case-insensitive substring of the name/key and by type."""
        names = sorted(require_namespaces(namespaces))
        text = (
            "SELECT e.id, e.key, e.name, e.type, n.name, count(ce.chunk_id) AS mentions"
            " FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
            " JOIN chunk_entities ce ON ce.entity_id = e.id"
            f" WHERE n.name IN ({marks(len(names))})"
        )
        params: list[object] = list(names)
        if query:
            # '!' escapes: a backslash is no portable LIKE escape (standard strings)
            text += " AND (e.key LIKE ? ESCAPE '!' OR lower(e.name) LIKE ? ESCAPE '!')"
            pattern = "%" + query.casefold().replace("!", "!!").replace("%", "!%").replace(
                "_", "!_") + "%"
            params += [pattern, pattern]
        if entity_type:
            text += " AND e.type = ?"
            params.append(entity_type)
        text += (" GROUP BY e.id, e.key, e.name, e.type, n.name"
                 f" ORDER BY mentions DESC, e.key{self.backend.binary} LIMIT ?")
        params.append(limit)
        return [EntityInfo(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[5]))
                for r in self._rows(text, params)]

    def entities_by_key(
        self, keys: Iterable[str], namespaces: Iterable[str]
    ) -> list[EntityInfo]:
        """Entities whose canonical key is one of ``keys``, in any of ``namespaces``."""
        wanted = list(dict.fromkeys(keys))
        names = sorted(require_namespaces(namespaces))
        if not wanted:
            return []
        found = {int(r[0]): EntityInfo(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]),
                                       int(r[5]))
                 for r in self._batched(
                     "SELECT e.id, e.key, e.name, e.type, n.name,"
                     " (SELECT count(*) FROM chunk_entities ce WHERE ce.entity_id = e.id)"
                     " FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
                     f" WHERE n.name IN ({marks(len(names))}) AND e.key IN ({{marks}})",
                     wanted, names)}
        # ties (one key in two namespaces) in id order, as an id lookup returned them
        return sorted(found.values(), key=lambda e: (-e.chunk_count, e.key, e.id))

    def neighbors(self, entity_ids: Iterable[int], limit: int = 20) -> list[Neighbor]:
        """Entities linked to any of ``entity_ids``, strongest first: NPMI weight damped by
        support, ``weight * chunks / (chunks + 1)``, so one-off co-mentions rank below
        relationships seen in several chunks."""
        ids = list(dict.fromkeys(int(i) for i in entity_ids))
        if not ids:
            return []
        m = marks(len(ids))
        rows = self._rows(
            "SELECT other, max(weight * chunks / (chunks + 1.0)) AS strength, max(weight),"
            " max(chunks) FROM ("
            f" SELECT target AS other, weight, chunks FROM entity_edges WHERE source IN ({m})"
            " UNION ALL"
            f" SELECT source AS other, weight, chunks FROM entity_edges WHERE target IN ({m})"
            f") ends WHERE other NOT IN ({m}) GROUP BY other"
            " ORDER BY strength DESC, other LIMIT ?",
            [*ids, *ids, *ids, limit])
        infos = self.entities_by_id(int(r[0]) for r in rows)
        return [Neighbor(infos[int(r[0])], float(r[2]), int(r[3])) for r in rows
                if int(r[0]) in infos]

    def chunks_for_entities(
        self, entity_ids: Iterable[int], per_entity: int = 20
    ) -> list[tuple[int, int, float, int]]:
        """(entity id, chunk row id, association score, first position) of text chunks that
        mention each entity, strongest association first, ``per_entity`` at most each."""
        wanted = list(dict.fromkeys(int(e) for e in entity_ids))
        found: dict[int, list[tuple[int, float, int]]] = {e: [] for e in wanted}
        for entity_id, chunk_id, score, first in self._per_entity(
                "SELECT ce.entity_id, ce.chunk_id, ce.score, ce.first_position"
                " FROM chunk_entities ce JOIN chunks c ON c.id = ce.chunk_id"
                " WHERE ce.entity_id = ? AND c.kind = 'text'"
                " ORDER BY ce.score DESC, ce.first_position, ce.chunk_id LIMIT ?",
                wanted, per_entity):
            found[int(entity_id)].append((int(chunk_id), float(score), int(first)))
        # each entity's rows in its statement's order (a UNION ALL keeps no order: sorted
        # again by the same key)
        return [(e, chunk_id, score, first) for e in wanted
                for chunk_id, score, first in sorted(found[e], key=lambda r: (-r[1], r[2], r[0]))]

    def entities_of_chunks(self, rowids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
        """Entity ids (with association score) linked to each chunk, strongest first."""
        out: dict[int, list[tuple[int, float]]] = {}
        for chunk_id, entity_id, score in self._batched(
            "SELECT chunk_id, entity_id, score FROM chunk_entities WHERE chunk_id IN ({marks})"
            " ORDER BY chunk_id, score DESC, entity_id",
            list(dict.fromkeys(int(r) for r in rowids)),
        ):
            out.setdefault(int(chunk_id), []).append((int(entity_id), float(score)))
        return out

    def entity_chunk_counts(self, entity_ids: Iterable[int]) -> dict[int, int]:
        """How many chunks mention each entity (its document frequency)."""
        return {int(a): int(b) for a, b in self._batched(
            "SELECT entity_id, count(*) FROM chunk_entities WHERE entity_id IN ({marks})"
            " GROUP BY entity_id", list(dict.fromkeys(int(e) for e in entity_ids)))}

    def namespace_chunk_count(self, namespaces: Iterable[str]) -> int:
        """Text chunks in the namespaces."""
        names = sorted(require_namespaces(namespaces))
        return int(self._rows(
            "SELECT count(*) FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
            f" WHERE n.name IN ({marks(len(names))}) AND c.kind = 'text'", names)[0][0])

    def community_peers(self, entity_ids: Iterable[int], limit: int = 50) -> list[int]:
        """Entities sharing the finest community of any given entity, most central first."""
        ids = list(dict.fromkeys(int(e) for e in entity_ids))
        if not ids:
            return []
        m = marks(len(ids))
        return [int(r[0]) for r in self._rows(
            "WITH mine AS (SELECT cm.community_id, c.level FROM community_members cm"
            f" JOIN communities c ON c.id = cm.community_id WHERE cm.entity_id IN ({m})),"
            " finest AS (SELECT community_id FROM mine WHERE level = (SELECT max(level) FROM mine))"
            " SELECT cm.entity_id, max(cm.centrality) AS centrality FROM community_members cm"
            " WHERE cm.community_id IN (SELECT community_id FROM finest)"
            f" AND cm.entity_id NOT IN ({m})"
            " GROUP BY cm.entity_id ORDER BY centrality DESC, cm.entity_id LIMIT ?",
            [*ids, *ids, limit])]

    def edge_support(self, source: int, target: int, limit: int = 10) -> list[int]:
        """Row ids of chunks where both entities occur (the evidence for their edge)."""
        return [int(r[0]) for r in self._rows(
            "SELECT a.chunk_id FROM chunk_entities a JOIN chunk_entities b"
            " ON a.chunk_id = b.chunk_id WHERE a.entity_id = ? AND b.entity_id = ?"
            " ORDER BY a.score + b.score DESC, a.chunk_id LIMIT ?", (source, target, limit))]

    def communities(
        self, namespaces: Iterable[str], level: int | None = None, limit: int = 100
    ) -> list[CommunityInfo]:
        """Communities of ``namespaces`` (largest first), with their top members' names."""
        names = sorted(require_namespaces(namespaces))
        binary = self.backend.binary
        text = (
            "SELECT c.id, n.name, c.level, c.ordinal, c.parent_id, c.size, c.title,"
            " c.report_doc_id FROM communities c JOIN namespaces n ON n.id = c.namespace_id"
            f" WHERE n.name IN ({marks(len(names))})"
        )
        params: list[object] = list(names)
        if level is not None:
            text += " AND c.level = ?"
            params.append(level)
        text += f" ORDER BY c.level, c.size DESC, n.name{binary}, c.ordinal LIMIT ?"
        params.append(limit)
        out: list[CommunityInfo] = []
        for row in self._rows(text, params):
            members = tuple(str(m[0]) for m in self._rows(
                "SELECT e.name FROM community_members cm JOIN entities e ON e.id = cm.entity_id"
                f" WHERE cm.community_id = ? ORDER BY cm.centrality DESC, e.key{binary}"
                " LIMIT 10", (row[0],)))
            out.append(CommunityInfo(int(row[0]), str(row[1]), int(row[2]), int(row[3]),
                                     None if row[4] is None else int(row[4]), int(row[5]),
                                     str(row[6]), row[7], members))
        return out

    def community_by_report(self, report_doc_id: str) -> tuple[int, list[int]] | None:
        """(community id, member entity ids) of the community a report document describes."""
        rows = self._rows("SELECT id FROM communities WHERE report_doc_id = ?", (report_doc_id,))
        if not rows:
            return None
        return int(rows[0][0]), self.community_members(int(rows[0][0]))

    def community_members(self, community_id: int) -> list[int]:
        """Member entity ids of a community, most central first."""
        return [int(r[0]) for r in self._rows(
            "SELECT entity_id FROM community_members WHERE community_id = ?"
            " ORDER BY centrality DESC, entity_id", (community_id,))]

    def report_row_sources(self, community_id: int) -> dict[str, RowOrigin]:
        """Every table row (doc id -> origin) the community's title and report were built
        from, as recorded when the graph was built (complete, never sampled)."""
        return {str(r[0]): RowOrigin(*(str(v) for v in r[1:6])) for r in self._rows(
            "SELECT doc_id, origin_source, origin_schema, origin_table, origin_pk_column,"
            " origin_pk_value FROM community_row_sources WHERE community_id = ?",
            (community_id,))}

    def report_access_sources(self, community_id: int) -> dict[str, frozenset[str]]:
        """Every document with a permission set the community's title and report may draw
        on, with its set (see the port)."""
        return {str(doc_id): self.dialect.principals_value(access) for doc_id, access
                in self._rows("SELECT doc_id, access FROM community_access_sources"
                              " WHERE community_id = ?", (community_id,))}

    def community_signature(self, namespace: str) -> list[tuple[int, int, tuple[str, ...]]]:
        """(level, ordinal, sorted member keys) of every community: equal for equal graphs,
        whatever the internal ids (used to compare incremental and fresh builds)."""
        grouped: dict[tuple[int, int], list[str]] = {}
        for level, ordinal, key in self._rows(
            "SELECT c.level, c.ordinal, e.key FROM communities c"
            " JOIN namespaces n ON n.id = c.namespace_id"
            " JOIN community_members cm ON cm.community_id = c.id"
            " JOIN entities e ON e.id = cm.entity_id WHERE n.name = ?", (namespace,)):
            grouped.setdefault((int(level), int(ordinal)), []).append(str(key))
        return [(lv, od, tuple(sorted(keys))) for (lv, od), keys in sorted(grouped.items())]

    def edge_signature(self, namespace: str) -> list[tuple[str, str, float, int]]:
        """(key a, key b, weight, chunks) of every edge, by key: id-independent."""
        rows = self._rows(
            "SELECT a.key, b.key, ed.weight, ed.chunks FROM entity_edges ed"
            " JOIN entities a ON a.id = ed.source JOIN entities b ON b.id = ed.target"
            " JOIN namespaces n ON n.id = ed.namespace_id WHERE n.name = ?", (namespace,))
        return sorted(
            (min(a, b), max(a, b), round(float(w), 6), int(c)) for a, b, w, c in rows
        )

    # -- bounded lane reads --------------------------------------------------------
    # The general queries above count or sort every link of an entity (a frequent entity
    # has thousands), which dominated cohort lane latency at 100k chunks; these read at
    # most ``cap`` links per entity and skip the mention counts.

    def _per_entity(self, select: str, entity_ids: Sequence[int], *limits: int
                    ) -> list[Any]:
        """Rows of ``select`` (one entity's bounded read: its first ``?`` the entity id, then
        one ``?`` for each of ``limits``) for every entity, in one statement per
        :data:`_CAPPED_BATCH` entities: a ``UNION ALL`` of the per-entity reads, each a
        derived table (so its ``ORDER BY`` and ``LIMIT`` stay its own on SQLite and
        PostgreSQL alike). Each entity is still read only up to its limit of its index
        range, never all its links; what the statements save is the round trip per
        entity."""
        rows: list[Any] = []
        for start in range(0, len(entity_ids), _CAPPED_BATCH):
            part = entity_ids[start:start + _CAPPED_BATCH]
            rows.extend(self._rows(
                " UNION ALL ".join(f"SELECT * FROM ({select}) e{i}" for i in range(len(part))),
                [value for e in part for value in (e, *limits)]))
        return rows

    def capped_entities(self, entity_ids: Iterable[int], cap: int) -> dict[int, CappedEntity]:
        """Each entity's key, namespace and mentions counted up to ``cap + 1``: one
        statement for all of them, each count a correlated subquery reading at most
        ``cap + 1`` entries of the entity's index range (never all its links)."""
        return {int(r[0]): CappedEntity(str(r[1]), int(r[2]), int(r[3])) for r in self._batched(
            f"SELECT e.id, e.key, e.namespace_id, {_CAPPED_COUNT} FROM entities e"
            " WHERE e.id IN ({marks})",
            list(dict.fromkeys(int(i) for i in entity_ids)), [cap + 1])}

    def chunk_links(self, rowids: Iterable[int]) -> dict[int, list[Link]]:
        """Each chunk's links (every given chunk present), strongest first."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        out: dict[int, list[Link]] = {r: [] for r in ids}
        for chunk_id, entity_id, score, first in self._batched(
            "SELECT chunk_id, entity_id, score, first_position FROM chunk_entities"
            " WHERE chunk_id IN ({marks}) ORDER BY chunk_id, score DESC, first_position,"
            " entity_id", ids):
            out[int(chunk_id)].append((int(entity_id), float(score), int(first)))
        return out

    def capped_chunks(self, entity_ids: Iterable[int], per_entity: int, scan: int
                      ) -> list[tuple[int, int, float, int]]:
        """(entity, chunk row id, score, first position): each entity's ``per_entity``
        strongest links among its first ``scan`` by chunk row id (an index range read per
        entity, all entities in one statement)."""
        wanted = list(dict.fromkeys(int(i) for i in entity_ids))
        kept: dict[int, list[Any]] = {e: [] for e in wanted}
        # The strongest ``per_entity`` of the ``scan`` scanned are chosen in SQL: a query
        # scans thousands of links here and keeps a few dozen.
        for row in self._per_entity(
                "SELECT entity_id, chunk_id, score, first_position FROM"
                " (SELECT entity_id, chunk_id, score, first_position FROM chunk_entities"
                "  WHERE entity_id = ? ORDER BY chunk_id LIMIT ?) scanned"
                " ORDER BY score DESC, first_position, chunk_id LIMIT ?",
                wanted, scan, per_entity):
            kept[int(row[0])].append(row)
        # each entity's rows in its statement's order (a UNION ALL keeps no order: sorted
        # again by the same key)
        return [(e, int(r[1]), float(r[2]), int(r[3])) for e in wanted
                for r in sorted(kept[e], key=lambda r: (-r[2], r[3], r[1]))]

    def entities_in(self, keys: Sequence[str], namespace_ids: Sequence[int], cap: int,
                    ids: Sequence[int] = ()) -> list[tuple[EntityInfo, CappedEntity]]:
        """Entities with one of ``keys`` in the namespaces, and those of ``ids`` (any
        namespace), each once (``chunk_count`` their mentions counted up to ``cap + 1``,
        as :meth:`capped_entities`), in one statement when both fit one IN list each."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        named = bool(keys) and bool(namespace_ids)
        if not named and not wanted:
            return []
        select = (f"SELECT e.id, e.key, e.name, e.type, n.name, e.namespace_id, {_CAPPED_COUNT}"
                  " FROM entities e JOIN namespaces n ON n.id = e.namespace_id WHERE ")
        by_key = f"(e.namespace_id IN ({marks(len(namespace_ids))}) AND e.key IN ({{marks}}))"
        if len(keys) > _BATCH or len(wanted) > _BATCH or len(namespace_ids) > _BATCH:
            rows = list(self._batched(select + by_key, list(keys), [cap + 1, *namespace_ids])
                        ) if named else []
            rows += self._batched(select + "e.id IN ({marks})", wanted, [cap + 1])
        else:
            where = [by_key.format(marks=marks(len(keys)))] if named else []
            where += [f"e.id IN ({marks(len(wanted))})"] if wanted else []
            params = [cap + 1, *((*namespace_ids, *keys) if named else ()), *wanted]
            rows = self._rows(select + " OR ".join(where), params)
        found = {int(r[0]): r for r in rows}
        return [(EntityInfo(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4]), int(r[6])),
                 CappedEntity(str(r[1]), int(r[5]), int(r[6]))) for r in found.values()]

    def structural_neighbours(self, rowids: Sequence[int]) -> list[tuple[int, int, str]]:
        """(chunk, neighbour, relation) for the previous, next and parent chunk of each chunk;
        relation is ``prev``, ``next`` or ``parent``. Neighbours share the chunk's document."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        out: list[tuple[int, int, str]] = []
        for start in range(0, len(ids), _BATCH):
            part = ids[start:start + _BATCH]
            for relation in ("prev", "next", "parent"):
                out.extend((int(a), int(b), relation) for a, b in self._rows(
                    "SELECT c.id, n.id FROM chunks c JOIN chunks n"
                    f" ON n.document_id = c.document_id AND n.chunk_index = c.{relation}_index"
                    f" WHERE c.id IN ({marks(len(part))}) AND n.id != c.id", part))
        return out
