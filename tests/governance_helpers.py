"""Build indexes with table-row documents for governance tests (no table loader needed)."""

from __future__ import annotations

from typing import Any

from docgraph import DocGraph
from docgraph.ingest.chunk import chunk_document
from docgraph.ingest.extract import extract
from docgraph.model import RowOrigin
from docgraph.store.base import DocumentWrite


def add_row_documents(
    graph: DocGraph, namespace: str, table: str, rows: dict[str, str], source: str = "crm",
    schema: str = "public", column: str = "body",
) -> None:
    """Index ``rows`` (pk -> text) as row documents ``schema.table.column/<pk>``."""
    if graph.store.embedding_model() is None:  # as the ingest pipeline does
        graph.store.set_embedding_model(graph.embedder.name, graph.embedder.dimension)
    record = graph.store.add_source(f"sql://{source}/{schema}.{table}.{column}", namespace)
    for pk, text in rows.items():
        doc_id = f"{schema}.{table}.{column}/{pk}"
        document = extract(text.encode(), f"{doc_id}.txt")
        chunks = chunk_document(document, graph.embedder.count_tokens, 200)
        crumbs = [c.breadcrumb(doc_id) for c in chunks]
        embedded = [f"{b} {c.text}" for b, c in zip(crumbs, chunks, strict=True)]
        links = ([graph.extractor.links(c.text) for c in chunks]
                 if graph.extractor is not None else [])
        graph.store.write_document(DocumentWrite(
            source=record, path=doc_id, doc_id=doc_id, title=doc_id, content_hash=text,
            change_token=text, media_type="text/plain", chunks=chunks, breadcrumbs=crumbs,
            embedded_texts=embedded, vectors=graph.embedder.embed_documents(embedded),
            entity_links=links,
            origin=RowOrigin(source, schema, table, "id", pk),
        ))
    graph.build_graph([namespace])


def create_rls_tickets(conn: Any, policy: str, roles: tuple[str, ...] = ("alice", "bob", "carol")
                       ) -> None:
    """A ``tickets (id, owner, body)`` table under forced row-level security with one SELECT
    ``policy`` (a SQL condition), readable by ``roles`` (created NOLOGIN when missing)."""
    for role in roles:
        conn.exec_driver_sql(
            f"DO $$ BEGIN CREATE ROLE {role} NOLOGIN; EXCEPTION WHEN duplicate_object "
            "THEN NULL; END $$")
    conn.exec_driver_sql("CREATE TABLE tickets (id integer PRIMARY KEY, owner text, body text)")
    conn.exec_driver_sql("ALTER TABLE tickets ENABLE ROW LEVEL SECURITY")
    conn.exec_driver_sql("ALTER TABLE tickets FORCE ROW LEVEL SECURITY")
    conn.exec_driver_sql(f"CREATE POLICY readers ON tickets FOR SELECT USING ({policy})")
    conn.exec_driver_sql(f"GRANT SELECT ON tickets TO {', '.join(roles)}")
