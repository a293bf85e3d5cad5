"""Entity, edge and community tables of the embedded catalog, and graph queries.

Everything is keyed by namespace: rebuilding one namespace's graph replaces only that
namespace's edges, communities and community reports, in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import cast

import numpy as np
import numpy.typing as npt

from docgraph.ingest.embed_cache import text_hash
from docgraph.model import EntityLink, RowOrigin, Vector
from docgraph.store.base import require_namespaces
from docgraph.store.lexical import EncodedTerms
from docgraph.store.sqlite.catalog import SQLiteCatalog

# Secondary indexes of entity_edges (as created by the catalog schema), rebuilt around bulk
# edge writes.
_EDGE_INDEXES = (("entity_edges_target", "target, source"),
                 ("entity_edges_namespace", "namespace_id"))
INDEX_REBUILD_MIN_EDGES = 10_000  # below this, updating the indexes row by row is as fast


@dataclass(frozen=True, slots=True)
class EntityInfo:
    """An entity of one namespace and how many chunks mention it."""

    id: int
    key: str
    name: str
    type: str
    namespace: str
    chunk_count: int


@dataclass(frozen=True, slots=True)
class Neighbor:
    """An entity linked to another by co-occurrence: NPMI weight and supporting chunks."""

    entity: EntityInfo
    weight: float
    chunks: int


@dataclass(frozen=True, slots=True)
class CommunityInfo:
    """A community of entities with its report."""

    id: int
    namespace: str
    level: int
    ordinal: int
    parent_id: int | None
    size: int
    title: str
    report_doc_id: str | None
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NamespaceLinks:
    """All chunk-entity links of a namespace as parallel arrays (text chunks only), and the
    table row behind each linked chunk of a row document, read in the same snapshot."""

    chunk_rowids: npt.NDArray[np.int64]
    entity_ids: npt.NDArray[np.int64]
    scores: npt.NDArray[np.float32]
    row_chunks: dict[int, tuple[str, RowOrigin]] = field(default_factory=dict)
    #: Row ids of the namespace's text chunks in identity order (document id, chunk index):
    #: ties broken by this order do not depend on when a chunk was written.
    identity_order: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))


@dataclass(frozen=True, slots=True)
class EdgeTable:
    """Undirected edges as parallel arrays, ``source < target`` by entity id."""

    source: npt.NDArray[np.int64]
    target: npt.NDArray[np.int64]
    weight: npt.NDArray[np.float64]
    chunks: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.source)


@dataclass(frozen=True, slots=True)
class CommunityRow:
    """A community to store: members with centrality; ``parent`` indexes the same list."""

    level: int
    ordinal: int
    parent: int | None
    title: str
    members: Sequence[tuple[int, float]]
    report_text: str | None
    report_vector: Vector | None
    #: Every row document (doc id, origin) whose chunks link a member: all the table rows
    #: the title and report may draw on (names, relationships, passages).
    row_sources: Sequence[tuple[str, RowOrigin]] = ()


class SQLiteGraphStore:
    """Graph persistence and graph queries on a :class:`SQLiteCatalog` file."""

    def __init__(self, catalog: SQLiteCatalog) -> None:
        self.catalog = catalog

    # -- build state ---------------------------------------------------------

    def dirty_namespaces(self) -> list[str]:
        """Namespaces whose documents changed since their graph was last built."""
        rows = self.catalog.connection().execute(
            "SELECT name FROM namespaces WHERE graph_dirty = 1 ORDER BY name"
        ).fetchall()
        return [str(r[0]) for r in rows]

    def vocabulary_hash(self, namespace: str) -> str:
        """Fingerprint of the vocabulary the namespace's links were extracted with."""
        row = self.catalog.connection().execute(
            "SELECT vocab_hash FROM namespaces WHERE name = ?", (namespace,)
        ).fetchone()
        return str(row[0]) if row else ""

    def namespace_id(self, namespace: str) -> int | None:
        """Internal id of a namespace, or None if unknown."""
        return self.catalog.namespace_ids([namespace]).get(namespace)

    # -- links ---------------------------------------------------------------

    def links(self, namespace: str) -> NamespaceLinks:
        """Every chunk-entity link of the namespace's text chunks, by chunk then entity, and
        the row origin of each linked row-document chunk, both from one read snapshot (so a
        report built from these links knows every row it can draw on).

        Rows stream straight into one array and are sorted there: an ``ORDER BY`` would make
        SQLite build a temporary B-tree of every link first.
        """
        db = self.catalog.connection()
        own = not db.in_transaction
        if own:
            db.execute("BEGIN")  # one snapshot for both reads (WAL readers never block)
        try:
            cursor = db.execute(
                "SELECT ce.chunk_id, ce.entity_id, ce.score FROM chunk_entities ce"
                " JOIN chunks c ON c.id = ce.chunk_id JOIN namespaces n ON n.id = c.namespace_id"
                " WHERE n.name = ? AND c.kind = 'text'",
                (namespace,),
            )
            data = np.fromiter(chain.from_iterable(cursor), dtype=np.float64).reshape(-1, 3)
            row_chunks = {
                int(r[0]): (str(r[1]), RowOrigin(*(str(v) for v in r[2:7])))
                for r in db.execute(
                    "SELECT c.id, d.doc_id, d.origin_source, d.origin_schema, d.origin_table,"
                    " d.origin_pk_column, d.origin_pk_value FROM chunks c"
                    " JOIN documents d ON d.id = c.document_id"
                    " JOIN namespaces n ON n.id = c.namespace_id"
                    " WHERE n.name = ? AND c.kind = 'text' AND d.origin_source IS NOT NULL",
                    (namespace,),
                )
            }
            identity = np.fromiter(chain.from_iterable(db.execute(
                "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
                " JOIN namespaces n ON n.id = c.namespace_id"
                " WHERE n.name = ? AND c.kind = 'text' ORDER BY d.doc_id, c.chunk_index",
                (namespace,),
            )), dtype=np.int64)
        finally:
            if own:
                db.execute("COMMIT")
        chunk_ids, entity_ids = data[:, 0].astype(np.int64), data[:, 1].astype(np.int64)
        order = np.lexsort((entity_ids, chunk_ids))
        return NamespaceLinks(chunk_ids[order], entity_ids[order],
                              data[order, 2].astype(np.float32), row_chunks, identity)

    def chunk_texts(self, namespace: str) -> list[tuple[int, str]]:
        """(row id, text) of every text chunk of the namespace, for re-extraction."""
        rows = self.catalog.connection().execute(
            "SELECT c.id, c.text FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
            " WHERE n.name = ? AND c.kind = 'text' ORDER BY c.id",
            (namespace,),
        ).fetchall()
        return [(int(r[0]), str(r[1])) for r in rows]

    def replace_links(
        self, namespace: str, links: Sequence[tuple[int, Sequence[EntityLink]]], vocab_hash: str
    ) -> None:
        """Replace the entity links of the given chunks (one transaction) and record the
        vocabulary fingerprint they were extracted with."""
        ns_id = self.namespace_id(namespace)
        if ns_id is None:
            return
        with self.catalog.transaction() as db:
            db.executemany("DELETE FROM chunk_entities WHERE chunk_id = ?",
                           [(chunk_rowid,) for chunk_rowid, _ in links])
            pairs = [(chunk_rowid, link) for chunk_rowid, chunk_links in links
                     for link in chunk_links]
            if pairs:
                self.catalog._write_links(db, ns_id, pairs)
            db.execute(
                "UPDATE namespaces SET vocab_hash = ?, graph_dirty = 1 WHERE id = ?",
                (vocab_hash, ns_id),
            )

    def entity_names(self, namespace: str) -> dict[int, tuple[str, str, str]]:
        """(key, name, type) of every entity of the namespace by id, in one query."""
        rows = self.catalog.connection().execute(
            "SELECT e.id, e.key, e.name, e.type FROM entities e"
            " JOIN namespaces n ON n.id = e.namespace_id WHERE n.name = ?",
            (namespace,),
        ).fetchall()
        return {int(r[0]): (str(r[1]), str(r[2]), str(r[3])) for r in rows}

    def entities_by_id(self, ids: Iterable[int]) -> dict[int, EntityInfo]:
        """Entities (with chunk counts) by internal id."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        out: dict[int, EntityInfo] = {}
        db = self.catalog.connection()
        for start in range(0, len(wanted), 500):
            part = wanted[start:start + 500]
            marks = ",".join("?" * len(part))
            for row in db.execute(
                "SELECT e.id, e.key, e.name, e.type, n.name,"
                " (SELECT count(*) FROM chunk_entities ce WHERE ce.entity_id = e.id)"
                " FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
                f" WHERE e.id IN ({marks})",
                part,
            ):
                out[int(row[0])] = EntityInfo(int(row[0]), row[1], row[2], row[3], row[4],
                                              int(row[5]))
        return out

    # -- graph replace --------------------------------------------------------

    def report_vectors(self, namespace: str) -> dict[str, Vector]:
        """Vectors of the namespace's current community reports by embedded-text hash."""
        rows = self.catalog.connection().execute(
            "SELECT c.embed_hash, c.vector FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
            " WHERE n.name = ? AND c.kind = 'community_report'",
            (namespace,),
        ).fetchall()
        return {str(h): np.frombuffer(v, dtype=np.float32) for h, v in rows}

    def replace_graph(
        self,
        namespace: str,
        edges: EdgeTable,
        communities: Sequence[CommunityRow],
        vocab_hash: str,
    ) -> None:
        """Replace the namespace's orphan entities, edges, communities and reports at once.

        Bulk writes: edges go in sorted by primary key (appends to the B-tree), communities
        get their ids up front so every community and member row is one ``executemany``.
        """
        ns_id = self.namespace_id(namespace)
        if ns_id is None:
            return
        order = np.lexsort((edges.target, edges.source))
        with self.catalog.transaction() as db:
            db.execute(
                "DELETE FROM entities WHERE namespace_id = ? AND NOT EXISTS"
                " (SELECT 1 FROM chunk_entities ce WHERE ce.entity_id = entities.id)",
                (ns_id,),
            )
            db.execute("DELETE FROM entity_edges WHERE namespace_id = ?", (ns_id,))
            others = int(db.execute("SELECT count(*) FROM entity_edges").fetchone()[0])
            # Rebuilding the secondary indexes in one sort beats updating them row by row
            # when this namespace brings most of the table's edges.
            rebuild = len(edges) > max(others, INDEX_REBUILD_MIN_EDGES)
            if rebuild:
                for name, _ in _EDGE_INDEXES:
                    db.execute(f"DROP INDEX IF EXISTS {name}")
            db.executemany(
                "INSERT INTO entity_edges VALUES (?, ?, ?, ?, ?)",
                zip(repeat(ns_id), edges.source[order].tolist(), edges.target[order].tolist(),
                    edges.weight[order].tolist(), edges.chunks[order].tolist()),
            )
            if rebuild:
                for name, columns in _EDGE_INDEXES:
                    db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON entity_edges({columns})")
            db.execute(
                "DELETE FROM chunks WHERE namespace_id = ? AND kind = 'community_report'", (ns_id,)
            )
            db.execute(
                "DELETE FROM documents WHERE namespace_id = ? AND kind = 'community_report'",
                (ns_id,),
            )
            db.execute("DELETE FROM communities WHERE namespace_id = ?", (ns_id,))
            first_id = int(db.execute(
                "SELECT coalesce(max(id), 0) + 1 FROM communities").fetchone()[0])
            doc_ids = [
                f"community://{namespace}/L{c.level}/C{c.ordinal}"
                if c.report_text is not None else None
                for c in communities
            ]
            db.executemany(
                "INSERT INTO communities(id, namespace_id, level, ordinal, parent_id, size, title,"
                " report_doc_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(first_id + i, ns_id, c.level, c.ordinal,
                  None if c.parent is None else first_id + c.parent, len(c.members), c.title,
                  doc_ids[i]) for i, c in enumerate(communities)],
            )
            db.executemany(
                "INSERT INTO community_members VALUES (?, ?, ?)",
                [(first_id + i, entity_id, centrality) for i, c in enumerate(communities)
                 for entity_id, centrality in c.members],
            )
            db.executemany(
                "INSERT OR IGNORE INTO community_row_sources VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(first_id + i, doc_id, o.source, o.schema, o.table, o.pk_column, o.pk_value)
                 for i, c in enumerate(communities) for doc_id, o in c.row_sources],
            )
            now = time.time()
            reported = [i for i, (c, doc_id) in enumerate(zip(communities, doc_ids, strict=True))
                        if c.report_text is not None and c.report_vector is not None and doc_id]
            encoded, learnt = self.catalog.terms.encode(
                db, [(_report_crumb(communities[i].title), communities[i].report_text or "")
                     for i in reported])
            for i, lexical in zip(reported, encoded, strict=True):
                community = communities[i]
                self._insert_report(db, ns_id, doc_ids[i] or "", community.title,
                                    community.report_text or "",
                                    cast(Vector, community.report_vector), lexical, now)
            db.execute(
                "UPDATE namespaces SET graph_dirty = 0, graph_built_at = ?, vocab_hash = ?"
                " WHERE id = ?",
                (now, vocab_hash, ns_id),
            )
        self.catalog.terms.committed(learnt)

    @staticmethod
    def _insert_report(
        db: sqlite3.Connection, ns_id: int, doc_id: str, title: str, text: str,
        vector: Vector, lexical: EncodedTerms, now: float,
    ) -> None:
        """One community report: a document of kind ``community_report`` with one chunk."""
        doc = db.execute(
            "INSERT INTO documents(source_id, kind, namespace_id, doc_id, path, title,"
            " content_hash, change_token, media_type, chunk_count, updated_at)"
            " VALUES (NULL, 'community_report', ?, ?, ?, ?, ?, '', 'text/markdown', 1, ?)",
            (ns_id, doc_id, doc_id, title, text_hash(text), now),
        )
        db.execute(
            "INSERT INTO chunks(document_id, namespace_id, chunk_index, kind, text,"
            " breadcrumb, section_path, token_count, prev_index, next_index,"
            " parent_index, embed_hash, vector, terms, term_count)"
            " VALUES (?, ?, 0, 'community_report', ?, ?, ?, 0, NULL, NULL, NULL, ?, ?, ?, ?)",
            (int(doc.lastrowid or 0), ns_id, text, _report_crumb(title),
             json.dumps(["Community report", title]), text_hash(text),
             np.asarray(vector, dtype=np.float32).tobytes(), lexical.blob, lexical.length),
        )

    # -- queries --------------------------------------------------------------

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
        marks = ",".join("?" * len(names))
        sql = (
            "SELECT e.id, e.key, e.name, e.type, n.name, count(ce.chunk_id) AS mentions"
            " FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
            " JOIN chunk_entities ce ON ce.entity_id = e.id"
            f" WHERE n.name IN ({marks})"
        )
        params: list[object] = list(names)
        if query:
            sql += " AND (e.key LIKE ? ESCAPE '\\' OR e.name LIKE ? ESCAPE '\\')"
            pattern = "%" + query.casefold().replace("\\", "\\\\").replace("%", "\\%").replace(
                "_", "\\_") + "%"
            params += [pattern, pattern]
        if entity_type:
            sql += " AND e.type = ?"
            params.append(entity_type)
        sql += " GROUP BY e.id ORDER BY mentions DESC, e.key LIMIT ?"
        params.append(limit)
        rows = self.catalog.connection().execute(sql, params).fetchall()
        return [EntityInfo(int(r[0]), r[1], r[2], r[3], r[4], int(r[5])) for r in rows]

    def entities_by_key(
        self, keys: Iterable[str], namespaces: Iterable[str]
    ) -> list[EntityInfo]:
        """Entities whose canonical key is one of ``keys``, in any of ``namespaces``."""
        wanted = list(dict.fromkeys(keys))
        names = sorted(require_namespaces(namespaces))
        if not wanted:
            return []
        rows = self.catalog.connection().execute(
            "SELECT e.id FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
            f" WHERE n.name IN ({','.join('?' * len(names))})"
            f" AND e.key IN ({','.join('?' * len(wanted))})",
            [*names, *wanted],
        ).fetchall()
        found = self.entities_by_id(int(r[0]) for r in rows)
        return sorted(found.values(), key=lambda e: (-e.chunk_count, e.key))

    def neighbors(self, entity_ids: Iterable[int], limit: int = 20) -> list[Neighbor]:
        """Entities linked to any of ``entity_ids``, strongest first: NPMI weight damped by
        support, ``weight * chunks / (chunks + 1)``, so one-off co-mentions rank below
        relationships seen in several chunks."""
        ids = list(dict.fromkeys(int(i) for i in entity_ids))
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.catalog.connection().execute(
            "SELECT other, max(weight * chunks / (chunks + 1.0)) AS strength, max(weight),"
            " max(chunks) FROM ("
            f" SELECT target AS other, weight, chunks FROM entity_edges WHERE source IN ({marks})"
            " UNION ALL"
            f" SELECT source AS other, weight, chunks FROM entity_edges WHERE target IN ({marks})"
            f") WHERE other NOT IN ({marks}) GROUP BY other ORDER BY strength DESC, other LIMIT ?",
            [*ids, *ids, *ids, limit],
        ).fetchall()
        infos = self.entities_by_id(int(r[0]) for r in rows)
        return [Neighbor(infos[int(r[0])], float(r[2]), int(r[3])) for r in rows
                if int(r[0]) in infos]

    def chunks_for_entities(
        self, entity_ids: Iterable[int], per_entity: int = 20
    ) -> list[tuple[int, int, float, int]]:
        """(entity id, chunk row id, association score, first position) of text chunks that
        mention each entity, strongest association first, ``per_entity`` at most each."""
        out: list[tuple[int, int, float, int]] = []
        db = self.catalog.connection()
        for entity_id in dict.fromkeys(int(e) for e in entity_ids):
            out.extend(
                (entity_id, int(r[0]), float(r[1]), int(r[2])) for r in db.execute(
                    "SELECT ce.chunk_id, ce.score, ce.first_position FROM chunk_entities ce"
                    " JOIN chunks c ON c.id = ce.chunk_id WHERE ce.entity_id = ?"
                    " AND c.kind = 'text' ORDER BY ce.score DESC, ce.first_position, ce.chunk_id"
                    " LIMIT ?",
                    (entity_id, per_entity),
                )
            )
        return out

    def entities_of_chunks(self, rowids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
        """Entity ids (with association score) linked to each chunk, strongest first."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        out: dict[int, list[tuple[int, float]]] = {}
        db = self.catalog.connection()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            for chunk_id, entity_id, score in db.execute(
                "SELECT chunk_id, entity_id, score FROM chunk_entities"
                f" WHERE chunk_id IN ({','.join('?' * len(part))})"
                " ORDER BY chunk_id, score DESC, entity_id",
                part,
            ):
                out.setdefault(int(chunk_id), []).append((int(entity_id), float(score)))
        return out

    def entity_chunk_counts(self, entity_ids: Iterable[int]) -> dict[int, int]:
        """How many chunks mention each entity (its document frequency)."""
        ids = list(dict.fromkeys(int(e) for e in entity_ids))
        out: dict[int, int] = {}
        db = self.catalog.connection()
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            out.update((int(a), int(b)) for a, b in db.execute(
                "SELECT entity_id, count(*) FROM chunk_entities"
                f" WHERE entity_id IN ({','.join('?' * len(part))}) GROUP BY entity_id",
                part,
            ))
        return out

    def namespace_chunk_count(self, namespaces: Iterable[str]) -> int:
        """Text chunks in the namespaces."""
        names = sorted(require_namespaces(namespaces))
        row = self.catalog.connection().execute(
            "SELECT count(*) FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
            f" WHERE n.name IN ({','.join('?' * len(names))}) AND c.kind = 'text'",
            names,
        ).fetchone()
        return int(row[0])

    def community_peers(self, entity_ids: Iterable[int], limit: int = 50) -> list[int]:
        """Entities sharing the finest community of any given entity, most central first."""
        ids = list(dict.fromkeys(int(e) for e in entity_ids))
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self.catalog.connection().execute(
            "WITH mine AS (SELECT cm.community_id, c.level FROM community_members cm"
            f" JOIN communities c ON c.id = cm.community_id WHERE cm.entity_id IN ({marks})),"
            " finest AS (SELECT community_id FROM mine WHERE level = (SELECT max(level) FROM mine))"
            " SELECT cm.entity_id, max(cm.centrality) AS centrality FROM community_members cm"
            " WHERE cm.community_id IN (SELECT community_id FROM finest)"
            f" AND cm.entity_id NOT IN ({marks})"
            " GROUP BY cm.entity_id ORDER BY centrality DESC, cm.entity_id LIMIT ?",
            [*ids, *ids, limit],
        ).fetchall()
        return [int(r[0]) for r in rows]

    def edge_support(self, source: int, target: int, limit: int = 10) -> list[int]:
        """Row ids of chunks where both entities occur (the evidence for their edge)."""
        rows = self.catalog.connection().execute(
            "SELECT a.chunk_id FROM chunk_entities a JOIN chunk_entities b"
            " ON a.chunk_id = b.chunk_id WHERE a.entity_id = ? AND b.entity_id = ?"
            " ORDER BY a.score + b.score DESC, a.chunk_id LIMIT ?",
            (source, target, limit),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def communities(
        self, namespaces: Iterable[str], level: int | None = None, limit: int = 100
    ) -> list[CommunityInfo]:
        """Communities of ``namespaces`` (largest first), with their top members' names."""
        names = sorted(require_namespaces(namespaces))
        marks = ",".join("?" * len(names))
        sql = (
            "SELECT c.id, n.name, c.level, c.ordinal, c.parent_id, c.size, c.title,"
            " c.report_doc_id FROM communities c JOIN namespaces n ON n.id = c.namespace_id"
            f" WHERE n.name IN ({marks})"
        )
        params: list[object] = list(names)
        if level is not None:
            sql += " AND c.level = ?"
            params.append(level)
        sql += " ORDER BY c.level, c.size DESC, n.name, c.ordinal LIMIT ?"
        params.append(limit)
        db = self.catalog.connection()
        out: list[CommunityInfo] = []
        for row in db.execute(sql, params).fetchall():
            members = tuple(str(m[0]) for m in db.execute(
                "SELECT e.name FROM community_members cm JOIN entities e ON e.id = cm.entity_id"
                " WHERE cm.community_id = ? ORDER BY cm.centrality DESC, e.key LIMIT 10",
                (row[0],),
            ))
            out.append(CommunityInfo(int(row[0]), row[1], int(row[2]), int(row[3]),
                                     None if row[4] is None else int(row[4]), int(row[5]),
                                     row[6], row[7], members))
        return out

    def community_by_report(self, report_doc_id: str) -> tuple[int, list[int]] | None:
        """(community id, member entity ids) of the community a report document describes."""
        db = self.catalog.connection()
        row = db.execute(
            "SELECT id FROM communities WHERE report_doc_id = ?", (report_doc_id,)
        ).fetchone()
        if row is None:
            return None
        return int(row[0]), self.community_members(int(row[0]))

    def community_members(self, community_id: int) -> list[int]:
        """Member entity ids of a community, most central first."""
        return [int(r[0]) for r in self.catalog.connection().execute(
            "SELECT entity_id FROM community_members WHERE community_id = ?"
            " ORDER BY centrality DESC, entity_id", (community_id,))]

    def report_row_sources(self, community_id: int) -> dict[str, RowOrigin]:
        """Every table row (doc id -> origin) the community's title and report were built
        from, as recorded when the graph was built (complete, never sampled)."""
        rows = self.catalog.connection().execute(
            "SELECT doc_id, origin_source, origin_schema, origin_table, origin_pk_column,"
            " origin_pk_value FROM community_row_sources WHERE community_id = ?",
            (community_id,),
        ).fetchall()
        return {str(r[0]): RowOrigin(*(str(v) for v in r[1:6])) for r in rows}

    def community_signature(self, namespace: str) -> list[tuple[int, int, tuple[str, ...]]]:
        """(level, ordinal, sorted member keys) of every community: equal for equal graphs,
        whatever the internal ids (used to compare incremental and fresh builds)."""
        rows = self.catalog.connection().execute(
            "SELECT c.level, c.ordinal, e.key FROM communities c"
            " JOIN namespaces n ON n.id = c.namespace_id"
            " JOIN community_members cm ON cm.community_id = c.id"
            " JOIN entities e ON e.id = cm.entity_id WHERE n.name = ?"
            " ORDER BY c.level, c.ordinal, e.key",
            (namespace,),
        ).fetchall()
        grouped: dict[tuple[int, int], list[str]] = {}
        for level, ordinal, key in rows:
            grouped.setdefault((int(level), int(ordinal)), []).append(str(key))
        return [(lv, od, tuple(keys)) for (lv, od), keys in sorted(grouped.items())]

    def edge_signature(self, namespace: str) -> list[tuple[str, str, float, int]]:
        """(key a, key b, weight, chunks) of every edge, by key: id-independent."""
        rows = self.catalog.connection().execute(
            "SELECT a.key, b.key, ed.weight, ed.chunks FROM entity_edges ed"
            " JOIN entities a ON a.id = ed.source JOIN entities b ON b.id = ed.target"
            " JOIN namespaces n ON n.id = ed.namespace_id WHERE n.name = ?",
            (namespace,),
        ).fetchall()
        return sorted(
            (min(a, b), max(a, b), round(float(w), 6), int(c)) for a, b, w, c in rows
        )


def _report_crumb(title: str) -> str:
    return f"[Community report > {title}]"
