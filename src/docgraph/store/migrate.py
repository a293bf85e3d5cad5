"""Copy an embedded index into PostgreSQL without re-embedding (``docgraph migrate``).

Copied: the embedding model, every source, every document (content hash and change token
too, so the next build there skips unchanged files, its format's metadata and its line
fingerprints) with its
chunks (with their pages and OCR flags), their stored vectors and their entity links,
recorded failures, the entity graph (entities, co-occurrence edges, communities with their
members and recorded row sources, the community reports with their stored vectors, and each
namespace's graph build state: dirty flag, vocabulary fingerprint, build time, so the copy
needs no graph rebuild), the SQL sources (their URLs never held passwords), the column tags
and the build history (with its phase outcomes, so status keeps the last build and its
staleness) and the bearer-token digests (revoked ones too, so they stay revoked). Row ids
are the target's own (entities and communities are mapped by key and position). Not copied:
traces, audit records and console sessions (signing in again after the move is enough; a
session is short-lived). Each document is one transaction on the target (a mail with its
attachments, which keep their link to it), the graph one more; the target must not hold
documents yet. The HNSW index is built once after the copy (``PostgresCatalog.bulk_load``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from docgraph.errors import StoreError
from docgraph.languages import ENGLISH
from docgraph.model import ChunkDraft, DocumentRecord, EntityLink, RowOrigin, SourceRecord
from docgraph.store.base import DocumentWrite
from docgraph.store.postgres.catalog import PostgresCatalog
from docgraph.store.postgres.graph import PostgresGraphBackend
from docgraph.store.sql.builds import SqlBuildHistoryStore
from docgraph.store.sql.graph import ReportDraft
from docgraph.store.sql.registry import SqlSourceRegistryStore
from docgraph.store.sqlite.catalog import SQLiteCatalog
from docgraph.store.sqlite.lifecycle import create_build_tables, create_registry_tables
from docgraph.store.sqlite.vectors import decode_vector, decode_vectors


@dataclass
class MigrationReport:
    """What a migration copied."""

    model: tuple[str, int]
    sources: int = 0
    documents: int = 0
    chunks: int = 0
    failures: int = 0
    entities: int = 0
    edges: int = 0
    communities: int = 0
    reports: int = 0
    sql_sources: int = 0
    column_tags: int = 0
    builds: int = 0
    tokens: int = 0


def migrate_to_postgres(
    embedded: SQLiteCatalog,
    target: PostgresCatalog,
    progress: Callable[[MigrationReport], None] | None = None,
) -> MigrationReport:
    """Copy ``embedded`` into the (empty) PostgreSQL catalog ``target``."""
    model = embedded.embedding_model()
    if model is None:
        raise StoreError(f"{embedded.path}: the index is empty (no embedding model recorded)")
    existing = target.connection().execute("SELECT count(*) FROM documents").fetchone()[0]
    if existing:
        raise StoreError(f"{target.display_url} already holds {existing} documents; "
                         "migrate into an empty database")
    recorded = target.embedding_model()
    if recorded is not None and recorded != model:
        raise StoreError(f"{target.display_url} is set up for embedding model {recorded}, "
                         f"the index was built with {model}")
    target.set_embedding_model(*model)
    report = MigrationReport(model=model)
    with target.bulk_load():
        for source in embedded.list_sources():
            copy = target.add_source(source.urn, source.namespace, source.display_name or None,
                                     source.public_url)
            report.sources += 1
            documents = embedded.documents_for_source(source)
            for path in sorted(documents):
                if documents[path].parent is not None:
                    continue  # copied with its mail
                copied = _copy_document(embedded, target, copy, documents[path])
                report.chunks += copied
                report.documents += 1 + sum(1 for d in documents.values() if d.parent == path)
                if progress is not None:
                    progress(report)
        _copy_graph(embedded, target, report)
    for failure in embedded.failures():
        for copy in target.list_sources():
            if copy.urn == failure.source_urn and copy.namespace == failure.namespace:
                target.record_failure(copy, failure.path, failure.reason, failure.access)
                report.failures += 1
    _copy_registry_and_history(embedded, target, report)
    report.tokens = _copy_tokens(embedded, target)
    return report


def _copy_registry_and_history(embedded: SQLiteCatalog, target: PostgresCatalog,
                               report: MigrationReport) -> None:
    """SQL sources, column tags and build records (oldest first, so they keep their order)."""
    create_registry_tables(embedded)  # an index that never registered one has no tables
    create_build_tables(embedded)
    source_registry, target_registry = (SqlSourceRegistryStore(embedded),
                                        SqlSourceRegistryStore(target))
    for sql_source in source_registry.sql_sources():
        target_registry.save_sql_source(sql_source)
        report.sql_sources += 1
    for tag in source_registry.tags():
        target_registry.save_tag(tag, time.time())
        report.column_tags += 1
    source_history, target_history = SqlBuildHistoryStore(embedded), SqlBuildHistoryStore(target)
    builds = source_history.recent(limit=2**31 - 1)
    for build in reversed(builds):
        target_history.record(build, keep=len(builds))
        report.builds += 1


def _copy_tokens(embedded: SQLiteCatalog, target: PostgresCatalog) -> int:
    """Copy the bearer-token digests (live and revoked) the target lacks; returns how many."""
    from docgraph.store.sql.tokens import SqlTokenStore

    if embedded.connection().execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'bearer_tokens'").fetchone() is None:
        return 0
    copy = SqlTokenStore(target)
    return sum(copy.add(e) for e in SqlTokenStore(embedded).entries(include_revoked=True))


def _copy_document(embedded: SQLiteCatalog, target: PostgresCatalog, copy: SourceRecord,
                   document: DocumentRecord) -> int:
    """Copy one document with its attachments (one transaction on the target); returns the
    chunks copied."""
    db = embedded.connection()
    write, hashes = _document_write(embedded, copy, document.id, document.path)
    children = db.execute("SELECT id, path FROM documents WHERE parent_id = ? ORDER BY path",
                          (document.id,)).fetchall()
    attachments = []
    for row_id, path in children:
        child, child_hashes = _document_write(embedded, copy, int(row_id), str(path))
        attachments.append(replace(child, embed_hashes=child_hashes))
    target.import_document(replace(write, attachments=attachments), hashes)
    return len(write.chunks) + sum(len(a.chunks) for a in attachments)


def _document_write(embedded: SQLiteCatalog, copy: SourceRecord, row_id: int, path: str
                    ) -> tuple[DocumentWrite, list[str]]:
    """The write that recreates document row ``row_id`` in ``copy``, and its chunks'
    embedded-text hashes."""
    db = embedded.connection()
    doc = db.execute(
        "SELECT id, doc_id, title, content_hash, change_token, media_type, origin_source,"
        " origin_schema, origin_table, origin_pk_column, origin_pk_value, metadata,"
        " line_hashes, lines_dropped, language FROM documents WHERE id = ?", (row_id,),
    ).fetchone()
    rows = db.execute(
        "SELECT chunk_index, text, breadcrumb, section_path, token_count, prev_index,"
        " next_index, parent_index, embed_hash, vector, page_first, page_last, ocr FROM chunks"
        " WHERE document_id = ? AND kind = 'text' ORDER BY chunk_index", (doc[0],),
    ).fetchall()
    links: dict[int, list[EntityLink]] = {}
    for r in db.execute(
        "SELECT c.chunk_index, e.key, e.name, e.type, ce.frequency, ce.first_position,"
        " ce.score FROM chunk_entities ce JOIN chunks c ON c.id = ce.chunk_id"
        " JOIN entities e ON e.id = ce.entity_id WHERE c.document_id = ? AND c.kind = 'text'"
        " ORDER BY c.chunk_index, e.key", (doc[0],),
    ):
        links.setdefault(int(r[0]), []).append(EntityLink(r[1], r[2], r[3], int(r[4]),
                                                          int(r[5]), float(r[6])))
    model = embedded.embedding_model()
    assert model is not None
    has = np.array([bool(r[9]) for r in rows], dtype=bool)  # pending chunks stay pending
    vectors = np.zeros((len(rows), model[1]), dtype=np.float32)
    vectors[has] = decode_vectors([r[9] for r in rows if r[9]], model[1], embedded.path)
    chunks = [ChunkDraft(int(r[0]), r[1], tuple(json.loads(r[3])), int(r[4]), r[5], r[6], r[7],
                         None if r[10] is None else (int(r[10]), int(r[11])), bool(r[12]))
              for r in rows]
    write = DocumentWrite(
        source=copy, path=path, doc_id=doc[1], title=doc[2], content_hash=doc[3],
        change_token=doc[4], media_type=doc[5], chunks=chunks,
        breadcrumbs=[r[2] for r in rows], embedded_texts=(), vectors=vectors,
        entity_links=[links.get(int(r[0]), []) for r in rows] if links else (),
        origin=None if doc[6] is None else RowOrigin(*doc[6:11]),
        metadata=json.loads(doc[11]),
        line_hashes=None if doc[12] is None else json.loads(doc[12]),
        lines_dropped=json.loads(doc[13]),
        language=doc[14] or ENGLISH,  # PostgreSQL counts its terms in the same language
        missing=None if has.all() else (~has).tolist(),
    )
    return write, [r[8] for r in rows]


def _copy_graph(embedded: SQLiteCatalog, target: PostgresCatalog,
                report: MigrationReport) -> None:
    """Entities, edges, communities (members, row sources, reports) and the graph build
    state of every namespace, in one transaction on the target (after the documents, whose
    links already name their entities)."""
    source = embedded.connection()
    backend = PostgresGraphBackend(target)
    with target.transaction() as db:
        for ns_id, name, dirty, vocab_hash, built_at in source.execute(
            "SELECT id, name, graph_dirty, vocab_hash, graph_built_at FROM namespaces"
            " ORDER BY id"
        ).fetchall():
            target_ns = target._namespace_id(db, str(name))
            entity_ids = _copy_entities(source, db, int(ns_id), target_ns)
            report.entities += len(entity_ids)
            edges: list[tuple[int, int, int, float, int]] = []
            for a, b, w, c in source.execute(
                "SELECT source, target, weight, chunks FROM entity_edges"
                " WHERE namespace_id = ?", (ns_id,)):
                low, high = sorted((entity_ids[int(a)], entity_ids[int(b)]))
                edges.append((target_ns, low, high, float(w), int(c)))
            edges.sort()
            backend.write_edges(db, edges, lambda: 0)
            report.edges += len(edges)
            _copy_communities(source, db, backend, int(ns_id), target_ns, entity_ids, report)
            db.execute("UPDATE namespaces SET graph_dirty = %s, vocab_hash = %s,"
                       " graph_built_at = %s WHERE id = %s",
                       (bool(dirty), str(vocab_hash), built_at, target_ns))


def _copy_entities(source: Any, db: Any, ns_id: int, target_ns: int) -> dict[int, int]:
    """Every entity of the namespace (those no copied link named too); source id -> target
    id."""
    rows = source.execute("SELECT id, key, name, type FROM entities WHERE namespace_id = ?"
                          " ORDER BY id", (ns_id,)).fetchall()
    with db.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO entities(namespace_id, key, name, type) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT (namespace_id, key) DO UPDATE SET name = excluded.name,"
            " type = excluded.type", [(target_ns, r[1], r[2], r[3]) for r in rows])
    by_key = dict(db.execute("SELECT key, id FROM entities WHERE namespace_id = %s",
                             (target_ns,)).fetchall())
    return {int(r[0]): int(by_key[r[1]]) for r in rows}


def _copy_communities(source: Any, db: Any, backend: PostgresGraphBackend, ns_id: int,
                      target_ns: int, entity_ids: dict[int, int],
                      report: MigrationReport) -> None:
    """Communities (parents first: lower ids), members, row sources and reports."""
    rows = source.execute(
        "SELECT id, level, ordinal, parent_id, size, title, report_doc_id FROM communities"
        " WHERE namespace_id = ? ORDER BY id", (ns_id,)).fetchall()
    ids = dict(zip((int(r[0]) for r in rows), backend.community_ids(db, len(rows)),
                   strict=True))
    with db.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO communities(id, namespace_id, level, ordinal, parent_id, size, title,"
            " report_doc_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [(ids[int(r[0])], target_ns, r[1], r[2], None if r[3] is None else ids[int(r[3])],
              r[4], r[5], r[6]) for r in rows])
        cursor.executemany(
            "INSERT INTO community_members(community_id, entity_id, centrality)"
            " VALUES (%s, %s, %s)",
            [(ids[int(c)], entity_ids[int(e)], float(w)) for c, e, w in source.execute(
                "SELECT cm.community_id, cm.entity_id, cm.centrality FROM community_members cm"
                " JOIN communities c ON c.id = cm.community_id WHERE c.namespace_id = ?",
                (ns_id,))])
        cursor.executemany(
            "INSERT INTO community_row_sources VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [(ids[int(r[0])], *r[1:]) for r in source.execute(
                "SELECT s.community_id, s.doc_id, s.origin_source, s.origin_schema,"
                " s.origin_table, s.origin_pk_column, s.origin_pk_value"
                " FROM community_row_sources s JOIN communities c ON c.id = s.community_id"
                " WHERE c.namespace_id = ?", (ns_id,))])
    report.communities += len(rows)
    drafts = [ReportDraft(str(r[0]), str(r[1]), str(r[2]), decode_vector(r[3]))
              for r in source.execute(
        "SELECT d.doc_id, d.title, c.text, c.vector FROM documents d"
        " JOIN chunks c ON c.document_id = d.id WHERE d.namespace_id = ?"
        " AND d.kind = 'community_report' ORDER BY d.id", (ns_id,))]
    backend.insert_reports(db, target_ns, drafts, time.time())
    report.reports += len(drafts)
