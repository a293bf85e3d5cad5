"""The graph store written once for every relational catalog (SQLite and PostgreSQL).

Tables (the backend's DDL: :mod:`docgraph.store.sqlite.schema` and migration 7 of
:mod:`docgraph.store.postgres.schema`): ``entities``, ``chunk_entities``, ``entity_edges``,
``communities``, ``community_members``, ``community_row_sources``, and the graph columns of
``namespaces`` (``graph_dirty``, ``vocab_hash``, ``graph_built_at``). Community reports are
documents and chunks of kind ``community_report``.

What truly differs between backends is a :class:`GraphBackend` (see
:class:`docgraph.store.sqlite.graph.SQLiteGraphBackend` and
:class:`docgraph.store.postgres.graph.PostgresGraphBackend`): the read snapshot of
:meth:`SqlGraphStore.links`, the bulk edge write, how community ids are reserved, how a
report chunk stores its vector (and BM25 terms), and how text sorts byte-wise.

Everything is keyed by namespace: rebuilding one namespace's graph replaces only that
namespace's edges, communities and community reports, in one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol

import numpy as np

from docgraph.model import EntityLink, RowOrigin, Vector
from docgraph.store.base import StoreCatalog, require_namespaces
from docgraph.store.graph import (
    CommunityInfo,
    CommunityRow,
    EdgeTable,
    EntityInfo,
    Link,
    NamespaceLinks,
    Neighbor,
)
from docgraph.store.sql.dialect import Dialect, SqlDatabase, marks
from docgraph.store.sql.links import write_links
from docgraph.text import text_hash

_BATCH = 500  # ids per IN list


class SqlCatalog(StoreCatalog, SqlDatabase, Protocol):
    """A relational catalog: the catalog port plus shared-SQL connections."""


@dataclass(frozen=True, slots=True)
class ReportDraft:
    """One community report to store as a document with one chunk."""

    doc_id: str
    title: str
    text: str
    vector: Vector
    embed_hash: str | None = None  # None: text_hash(text)

    @property
    def stored_hash(self) -> str:
        """The ``embed_hash`` its chunk records (see ``CommunityRow.report_hash``)."""
        return self.embed_hash or text_hash(self.text)

    @property
    def breadcrumb(self) -> str:
        """The report chunk's breadcrumb."""
        return f"[Community report > {self.title}]"


class GraphBackend(Protocol):
    """The few graph operations whose SQL (or speed) differs by backend."""

    #: Appended to a text column in ORDER BY so text sorts by code point on every backend.
    binary: str
    #: The chunks column holding the vector.
    vector_column: str

    def snapshot(self) -> AbstractContextManager[Any]:
        """A connection whose reads inside the block all see one snapshot."""
        ...

    def write_edges(self, db: Any, rows: Sequence[tuple[int, int, int, float, int]],
                    others: Callable[[], int]) -> None:
        """Insert (namespace id, source, target, weight, chunks) rows, sorted by key;
        ``others`` counts the edges of other namespaces (read only if needed)."""
        ...

    def community_ids(self, db: Any, count: int) -> list[int]:
        """``count`` fresh community ids, ascending (inside the replace transaction)."""
        ...

    def insert_reports(self, db: Any, ns_id: int, reports: Sequence[ReportDraft],
                       now: float) -> Callable[[], None]:
        """Store each report as a ``community_report`` document with one chunk (through
        :func:`insert_report_document`); returns what to run after the commit."""
        ...

    def decode_vector(self, raw: Any) -> Vector:
        """A stored vector column value as a float32 array."""
        ...


def insert_report_document(dialect: Dialect, db: Any, ns_id: int, report: ReportDraft,
                           now: float) -> int:
    """The ``community_report`` document row of one report; returns its row id."""
    row = db.execute(dialect.sql(
        "INSERT INTO documents(source_id, kind, namespace_id, doc_id, path, title,"
        " content_hash, change_token, media_type, chunk_count, updated_at)"
        " VALUES (NULL, 'community_report', ?, ?, ?, ?, ?, '', 'text/markdown', 1, ?)"
        " RETURNING id"),
        (ns_id, report.doc_id, report.doc_id, report.title, text_hash(report.text), now),
    ).fetchone()
    return int(row[0])


def report_section_path(report: ReportDraft) -> list[str]:
    """The section path of a report chunk."""
    return ["Community report", report.title]


class SqlGraphStore:
    """The :class:`~docgraph.store.graph.GraphStore` port on a relational catalog."""

    def __init__(self, catalog: SqlCatalog, backend: GraphBackend) -> None:
        self._catalog = catalog
        self.backend = backend
        self.dialect = catalog.dialect

    @property
    def catalog(self) -> SqlCatalog:
        """The catalog the graph lives in."""
        return self._catalog

    def _rows(self, text: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(self._catalog.connection().execute(self.dialect.sql(text),
                                                       params).fetchall())

    def _batched(self, text: str, ids: Sequence[Any], before: Sequence[Any] = ()
                 ) -> Iterable[Any]:
        """Rows of ``text`` (its ``{marks}`` an IN list) for ``ids`` in batches."""
        for start in range(0, len(ids), _BATCH):
            part = list(ids[start:start + _BATCH])
            yield from self._rows(text.format(marks=marks(len(part))), [*before, *part])

    # -- build state ---------------------------------------------------------------

    def dirty_namespaces(self) -> list[str]:
        """Namespaces whose documents changed since their graph was last built."""
        return [str(r[0]) for r in self._rows(
            "SELECT name FROM namespaces WHERE graph_dirty = TRUE"
            f" ORDER BY name{self.backend.binary}")]

    def vocabulary_hash(self, namespace: str) -> str:
        """Fingerprint of the vocabulary the namespace's links were extracted with."""
        rows = self._rows("SELECT vocab_hash FROM namespaces WHERE name = ?", (namespace,))
        return str(rows[0][0]) if rows else ""

    def namespace_id(self, namespace: str) -> int | None:
        """Internal id of a namespace, or None if unknown."""
        return self._catalog.namespace_ids([namespace]).get(namespace)

    # -- links ---------------------------------------------------------------------

    def links(self, namespace: str) -> NamespaceLinks:
        """Every chunk-entity link of the namespace's text chunks, by chunk then entity, and
        the row origin of each linked row-document chunk, both from one read snapshot (so a
        report built from these links knows every row it can draw on).

        Rows stream straight into one array and are sorted there: an ``ORDER BY`` would make
        SQLite build a temporary B-tree of every link first.
        """
        sql = self.dialect.sql
        with self.backend.snapshot() as db:
            cursor = db.execute(sql(
                "SELECT ce.chunk_id, ce.entity_id, ce.score FROM chunk_entities ce"
                " JOIN chunks c ON c.id = ce.chunk_id JOIN namespaces n ON n.id = c.namespace_id"
                " WHERE n.name = ? AND c.kind = 'text'"), (namespace,))
            data = np.fromiter(chain.from_iterable(cursor), dtype=np.float64).reshape(-1, 3)
            row_chunks = {
                int(r[0]): (str(r[1]), RowOrigin(*(str(v) for v in r[2:7])))
                for r in db.execute(sql(
                    "SELECT c.id, d.doc_id, d.origin_source, d.origin_schema, d.origin_table,"
                    " d.origin_pk_column, d.origin_pk_value FROM chunks c"
                    " JOIN documents d ON d.id = c.document_id"
                    " JOIN namespaces n ON n.id = c.namespace_id"
                    " WHERE n.name = ? AND c.kind = 'text' AND d.origin_source IS NOT NULL"),
                    (namespace,))
            }
            identity = np.fromiter(chain.from_iterable(db.execute(sql(
                "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
                " JOIN namespaces n ON n.id = c.namespace_id WHERE n.name = ? AND c.kind = 'text'"
                f" ORDER BY d.doc_id{self.backend.binary}, c.chunk_index"),
                (namespace,))), dtype=np.int64)
        chunk_ids, entity_ids = data[:, 0].astype(np.int64), data[:, 1].astype(np.int64)
        order = np.lexsort((entity_ids, chunk_ids))
        return NamespaceLinks(chunk_ids[order], entity_ids[order],
                              data[order, 2].astype(np.float32), row_chunks, identity)

    def chunk_texts(self, namespace: str) -> list[tuple[int, str]]:
        """(row id, text) of every text chunk of the namespace, for re-extraction."""
        return [(int(r[0]), str(r[1])) for r in self._rows(
            "SELECT c.id, c.text FROM chunks c JOIN namespaces n ON n.id = c.namespace_id"
            " WHERE n.name = ? AND c.kind = 'text' ORDER BY c.id", (namespace,))]

    def replace_links(
        self, namespace: str, links: Sequence[tuple[int, Sequence[EntityLink]]], vocab_hash: str
    ) -> None:
        """Replace the entity links of the given chunks (one transaction) and record the
        vocabulary fingerprint they were extracted with."""
        ns_id = self.namespace_id(namespace)
        if ns_id is None:
            return
        with self._catalog.transaction() as db:
            self.dialect.executemany(db, "DELETE FROM chunk_entities WHERE chunk_id = ?",
                                     [(chunk_rowid,) for chunk_rowid, _ in links])
            write_links(self.dialect, db, ns_id, [
                (chunk_rowid, link) for chunk_rowid, chunk_links in links
                for link in chunk_links])
            db.execute(self.dialect.sql(
                "UPDATE namespaces SET vocab_hash = ?, graph_dirty = TRUE WHERE id = ?"),
                (vocab_hash, ns_id))

    def entity_names(self, namespace: str) -> dict[int, tuple[str, str, str]]:
        """(key, name, type) of every entity of the namespace by id, in one query."""
        return {int(r[0]): (str(r[1]), str(r[2]), str(r[3])) for r in self._rows(
            "SELECT e.id, e.key, e.name, e.type FROM entities e"
            " JOIN namespaces n ON n.id = e.namespace_id WHERE n.name = ?", (namespace,))}

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

    # -- graph replace -------------------------------------------------------------

    def report_vectors(self, namespace: str) -> dict[str, Vector]:
        """Vectors of the namespace's current community reports by embedded-text hash."""
        return {str(h): self.backend.decode_vector(v) for h, v in self._rows(
            f"SELECT c.embed_hash, c.{self.backend.vector_column} FROM chunks c"
            " JOIN namespaces n ON n.id = c.namespace_id"
            " WHERE n.name = ? AND c.kind = 'community_report'", (namespace,))}

    def chunk_vectors(self, rowids: Sequence[int]) -> dict[int, Vector]:
        """Stored unit vectors of the given chunks (absent: deleted), ``_BATCH`` ids a query."""
        ids = list(dict.fromkeys(int(r) for r in rowids))
        out: dict[int, Vector] = {}
        for start in range(0, len(ids), _BATCH):
            part = ids[start:start + _BATCH]
            for rowid, raw in self._rows(
                f"SELECT id, {self.backend.vector_column} FROM chunks"
                f" WHERE id IN ({marks(len(part))})", part,
            ):
                out[int(rowid)] = self.backend.decode_vector(raw)
        return out

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
        sql, many = self.dialect.sql, self.dialect.executemany
        order = np.lexsort((edges.target, edges.source))
        with self._catalog.transaction() as db:
            db.execute(sql(
                "DELETE FROM entities WHERE namespace_id = ? AND NOT EXISTS"
                " (SELECT 1 FROM chunk_entities ce WHERE ce.entity_id = entities.id)"), (ns_id,))
            db.execute(sql("DELETE FROM entity_edges WHERE namespace_id = ?"), (ns_id,))
            self.backend.write_edges(
                db,
                list(zip([ns_id] * len(edges), edges.source[order].tolist(),
                         edges.target[order].tolist(), edges.weight[order].tolist(),
                         edges.chunks[order].tolist(), strict=True)),
                lambda: int(db.execute("SELECT count(*) FROM entity_edges").fetchone()[0]),
            )
            db.execute(sql("DELETE FROM chunks WHERE namespace_id = ?"
                           " AND kind = 'community_report'"), (ns_id,))
            db.execute(sql("DELETE FROM documents WHERE namespace_id = ?"
                           " AND kind = 'community_report'"), (ns_id,))
            db.execute(sql("DELETE FROM communities WHERE namespace_id = ?"), (ns_id,))
            ids = self.backend.community_ids(db, len(communities))
            doc_ids = [
                f"community://{namespace}/L{c.level}/C{c.ordinal}"
                if c.report_text is not None else None
                for c in communities
            ]
            many(db,
                 "INSERT INTO communities(id, namespace_id, level, ordinal, parent_id, size,"
                 " title, report_doc_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 [(ids[i], ns_id, c.level, c.ordinal,
                   None if c.parent is None else ids[c.parent], len(c.members), c.title,
                   doc_ids[i]) for i, c in enumerate(communities)])
            many(db,
                 "INSERT INTO community_members(community_id, entity_id, centrality)"
                 " VALUES (?, ?, ?)",
                 [(ids[i], entity_id, centrality) for i, c in enumerate(communities)
                  for entity_id, centrality in c.members])
            many(db,
                 "INSERT INTO community_row_sources(community_id, doc_id, origin_source,"
                 " origin_schema, origin_table, origin_pk_column, origin_pk_value)"
                 " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                 [(ids[i], doc_id, o.source, o.schema, o.table, o.pk_column, o.pk_value)
                  for i, c in enumerate(communities) for doc_id, o in c.row_sources])
            now = time.time()
            reports = [ReportDraft(doc_id, c.title, c.report_text, c.report_vector,
                                   c.report_hash)
                       for c, doc_id in zip(communities, doc_ids, strict=True)
                       if c.report_text is not None and c.report_vector is not None and doc_id]
            after_commit = self.backend.insert_reports(db, ns_id, reports, now)
            db.execute(sql(
                "UPDATE namespaces SET graph_dirty = FALSE, graph_built_at = ?, vocab_hash = ?"
                " WHERE id = ?"), (now, vocab_hash, ns_id))
        after_commit()

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
        rows = self._batched(
            "SELECT e.id FROM entities e JOIN namespaces n ON n.id = e.namespace_id"
            f" WHERE n.name IN ({marks(len(names))}) AND e.key IN ({{marks}})",
            wanted, names)
        found = self.entities_by_id(int(r[0]) for r in rows)
        return sorted(found.values(), key=lambda e: (-e.chunk_count, e.key))

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
        out: list[tuple[int, int, float, int]] = []
        for entity_id in dict.fromkeys(int(e) for e in entity_ids):
            out.extend((entity_id, int(r[0]), float(r[1]), int(r[2])) for r in self._rows(
                "SELECT ce.chunk_id, ce.score, ce.first_position FROM chunk_entities ce"
                " JOIN chunks c ON c.id = ce.chunk_id WHERE ce.entity_id = ?"
                " AND c.kind = 'text' ORDER BY ce.score DESC, ce.first_position, ce.chunk_id"
                " LIMIT ?", (entity_id, per_entity)))
        return out

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

    def capped_counts(self, entity_ids: Iterable[int], cap: int) -> dict[int, int]:
        """Chunks mentioning each entity, counted up to ``cap + 1``."""
        return {e: int(self._rows(
            "SELECT count(*) FROM (SELECT 1 FROM chunk_entities WHERE entity_id = ?"
            " LIMIT ?) capped", (e, cap + 1))[0][0])
            for e in dict.fromkeys(int(i) for i in entity_ids)}

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
        strongest links among its first ``scan`` by chunk row id (an index range read)."""
        out: list[tuple[int, int, float, int]] = []
        for e in dict.fromkeys(int(i) for i in entity_ids):
            rows = self._rows(
                "SELECT chunk_id, score, first_position FROM chunk_entities"
                " WHERE entity_id = ? ORDER BY chunk_id LIMIT ?", (e, scan))
            rows.sort(key=lambda r: (-r[1], r[2], r[0]))
            out.extend((e, int(r[0]), float(r[1]), int(r[2])) for r in rows[:per_entity])
        return out

    def chunk_documents(self, rowids: Iterable[int]) -> dict[int, tuple[int, str]]:
        """(document row id, title) of each chunk."""
        return {int(r): (int(d), str(t)) for r, d, t in self._batched(
            "SELECT c.id, c.document_id, d.title FROM chunks c"
            " JOIN documents d ON d.id = c.document_id WHERE c.id IN ({marks})",
            list(dict.fromkeys(int(r) for r in rowids)))}

    def entities_in(self, keys: Sequence[str], namespace_ids: Sequence[int]
                    ) -> list[tuple[int, str, str, str, str]]:
        """(id, key, name, type, namespace) of entities with one of ``keys``."""
        if not keys or not namespace_ids:
            return []
        rows = self._batched(
            "SELECT e.id, e.key, e.name, e.type, n.name FROM entities e"
            " JOIN namespaces n ON n.id = e.namespace_id"
            f" WHERE e.namespace_id IN ({marks(len(namespace_ids))}) AND e.key IN ({{marks}})",
            list(keys), list(namespace_ids))
        return [(int(r[0]), str(r[1]), str(r[2]), str(r[3]), str(r[4])) for r in rows]

    def entity_keys(self, entity_ids: Iterable[int]) -> dict[int, str]:
        """Canonical key of each entity."""
        return {int(a): str(b) for a, b in self._batched(
            "SELECT id, key FROM entities WHERE id IN ({marks})",
            list(dict.fromkeys(int(i) for i in entity_ids)))}

    def entities_within(self, entity_ids: Iterable[int], namespace_ids: Sequence[int]
                        ) -> set[int]:
        """The given entities that belong to one of the namespaces (looked up by id, the
        namespace compared here: a namespace filter in SQL makes SQLite scan the namespace's
        index instead)."""
        wanted = {int(n) for n in namespace_ids}
        return {int(i) for i, ns in self._batched(
            "SELECT id, namespace_id FROM entities WHERE id IN ({marks})",
            list(dict.fromkeys(int(i) for i in entity_ids))) if int(ns) in wanted}

    def chunks_within(self, rowids: Iterable[int], namespace_ids: Sequence[int]) -> set[int]:
        """The given chunks that are text chunks of one of the namespaces (by id, as
        :meth:`entities_within`)."""
        wanted = {int(n) for n in namespace_ids}
        return {int(i) for i, ns, kind in self._batched(
            "SELECT id, namespace_id, kind FROM chunks WHERE id IN ({marks})",
            list(dict.fromkeys(int(r) for r in rowids)))
            if int(ns) in wanted and kind == "text"}

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
