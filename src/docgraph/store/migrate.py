"""Copy an embedded index into PostgreSQL without re-embedding (``docgraph migrate``).

Copied: the embedding model, every source, every document (content hash and change token
too, so the next build there skips unchanged files) with its chunks and their stored
vectors, recorded failures, and the bearer-token digests (revoked ones too, so they stay
revoked). Not copied: the entity graph and community reports (the
PostgreSQL backend does not hold them yet), traces, build history and audit records.
Each document is one transaction on the target; the target must not hold documents yet.
The HNSW index is built once after the copy (``PostgresCatalog.bulk_load``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from docgraph.errors import StoreError
from docgraph.model import ChunkDraft, RowOrigin, SourceRecord
from docgraph.store.base import DocumentWrite
from docgraph.store.postgres.catalog import PostgresCatalog
from docgraph.store.sqlite.catalog import SQLiteCatalog


@dataclass
class MigrationReport:
    """What a migration copied."""

    model: tuple[str, int]
    sources: int = 0
    documents: int = 0
    chunks: int = 0
    failures: int = 0
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
            copy = target.add_source(source.urn, source.namespace)
            report.sources += 1
            for path in sorted(embedded.documents_for_source(source)):
                report.chunks += _copy_document(embedded, target, source, copy, path)
                report.documents += 1
                if progress is not None:
                    progress(report)
    for failure in embedded.failures():
        for copy in target.list_sources():
            if copy.urn == failure.source_urn and copy.namespace == failure.namespace:
                target.record_failure(copy, failure.path, failure.reason)
                report.failures += 1
    report.tokens = _copy_tokens(embedded, target)
    return report


def _copy_tokens(embedded: SQLiteCatalog, target: PostgresCatalog) -> int:
    """Copy the bearer-token digests (live and revoked) the target lacks; returns how many."""
    from docgraph.store.sql.tokens import SqlTokenStore

    if embedded.connection().execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'bearer_tokens'").fetchone() is None:
        return 0
    copy = SqlTokenStore(target)
    return sum(copy.add(e) for e in SqlTokenStore(embedded).entries(include_revoked=True))


def _copy_document(embedded: SQLiteCatalog, target: PostgresCatalog, source: SourceRecord,
                   copy: SourceRecord, path: str) -> int:
    db = embedded.connection()
    doc = db.execute(
        "SELECT id, doc_id, title, content_hash, change_token, media_type, origin_source,"
        " origin_schema, origin_table, origin_pk_column, origin_pk_value"
        " FROM documents WHERE source_id = ? AND path = ?", (source.id, path),
    ).fetchone()
    rows = db.execute(
        "SELECT chunk_index, text, breadcrumb, section_path, token_count, prev_index,"
        " next_index, parent_index, embed_hash, vector FROM chunks"
        " WHERE document_id = ? AND kind = 'text' ORDER BY chunk_index", (doc[0],),
    ).fetchall()
    dimension = target.embedding_model()
    assert dimension is not None
    vectors = (np.frombuffer(b"".join(r[9] for r in rows), dtype=np.float32)
               .reshape(len(rows), dimension[1]))
    chunks = [ChunkDraft(int(r[0]), r[1], tuple(json.loads(r[3])), int(r[4]), r[5], r[6], r[7])
              for r in rows]
    target.import_document(DocumentWrite(
        source=copy, path=path, doc_id=doc[1], title=doc[2], content_hash=doc[3],
        change_token=doc[4], media_type=doc[5], chunks=chunks,
        breadcrumbs=[r[2] for r in rows], embedded_texts=(), vectors=vectors,
        origin=None if doc[6] is None else RowOrigin(*doc[6:11]),
    ), [r[8] for r in rows])
    return len(rows)
