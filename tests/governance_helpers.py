"""Build indexes with table-row documents for governance tests (no table loader needed)."""

from __future__ import annotations

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
    record = graph.catalog.add_source(f"sql://{source}/{schema}.{table}.{column}", namespace)
    for pk, text in rows.items():
        doc_id = f"{schema}.{table}.{column}/{pk}"
        document = extract(text.encode(), f"{doc_id}.txt")
        chunks = chunk_document(document, graph.embedder.count_tokens, 200)
        crumbs = [c.breadcrumb(doc_id) for c in chunks]
        embedded = [f"{b} {c.text}" for b, c in zip(crumbs, chunks, strict=True)]
        links = ([graph.extractor.links(c.text) for c in chunks]
                 if graph.extractor is not None else [])
        graph.catalog.write_document(DocumentWrite(
            source=record, path=doc_id, doc_id=doc_id, title=doc_id, content_hash=text,
            change_token=text, media_type="text/plain", chunks=chunks, breadcrumbs=crumbs,
            embedded_texts=embedded, vectors=graph.embedder.embed_documents(embedded),
            entity_links=links,
            origin=RowOrigin(source, schema, table, "id", pk),
        ))
    graph.build_graph([namespace])
