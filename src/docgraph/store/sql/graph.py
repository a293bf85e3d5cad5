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

This module holds the build side (build state, links, the graph replace); the queries are
:mod:`docgraph.store.sql.graph_reads`, the chunk-entity link upsert
:mod:`docgraph.store.sql.links`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from itertools import chain
from typing import Any, Protocol

import numpy as np

from docgraph.model import EntityLink, RowOrigin, Vector
from docgraph.store.base import StoreCatalog
from docgraph.store.graph import CommunityRow, EdgeTable, NamespaceLinks
from docgraph.store.sql.dialect import Dialect, SqlDatabase, marks
from docgraph.store.sql.graph_reads import SqlGraphReads
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


class SqlGraphStore(SqlGraphReads):
    """The :class:`~docgraph.store.graph.GraphStore` port on a relational catalog: the build
    side here, the queries in :class:`~docgraph.store.sql.graph_reads.SqlGraphReads`."""

    def __init__(self, catalog: SqlCatalog, backend: GraphBackend) -> None:
        self._catalog = catalog
        self.backend = backend
        self.dialect = catalog.dialect

    @property
    def catalog(self) -> SqlCatalog:
        """The catalog the graph lives in."""
        return self._catalog

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
            access_chunks = {
                int(r[0]): (str(r[1]), self.dialect.principals_value(r[2]))
                for r in db.execute(sql(
                    "SELECT c.id, d.doc_id, d.access FROM chunks c"
                    " JOIN documents d ON d.id = c.document_id"
                    " JOIN namespaces n ON n.id = c.namespace_id"
                    " WHERE n.name = ? AND c.kind = 'text' AND d.access IS NOT NULL"),
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
                              data[order, 2].astype(np.float32), row_chunks, access_chunks,
                              identity)

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
                if raw is not None and raw != b"":  # a pending chunk has no vector yet
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
            many(db,
                 "INSERT INTO community_access_sources(community_id, doc_id, access)"
                 " VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                 [(ids[i], doc_id, self.dialect.access_param(access))
                  for i, c in enumerate(communities) for doc_id, access in c.access_sources])
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
