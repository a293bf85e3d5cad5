"""The build of a tagged column's rows (``natural_language``): one document per row,
incremental by the row text's hash, the documents of rows gone from the table deleted.
Run by :meth:`~docgraph.ingest.pipeline.IngestPipeline.index_rows`, through the same batch
writer as a folder's files."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from docgraph.ingest.batch import BatchWriter, Pending
from docgraph.ingest.prepare import prepare_document, source_language
from docgraph.ingest.report import IngestProgress, IngestReport, ProgressCallback
from docgraph.model import Block, BlockKind, ExtractedDocument, SourceRecord
from docgraph.sources.folder import FileEntry
from docgraph.sources.rows import RowDocument

if TYPE_CHECKING:
    from docgraph.ingest.pipeline import IngestPipeline


def index_rows(pipeline: IngestPipeline, source: SourceRecord, rows: Iterable[RowDocument],
               progress: ProgressCallback | None = None) -> IngestReport:
    """Bring the row documents of ``source`` up to date with ``rows`` (every current row,
    iterated once), as ``pipeline`` builds (its catalog, embedder and preparation spec);
    see :meth:`~docgraph.ingest.pipeline.IngestPipeline.index_rows`."""
    report = IngestReport(source=source)
    rows_spec = replace(pipeline.spec, count_lines=False, repeated=frozenset(),
                        language=source_language(source.urn, pipeline.sources))
    pipeline.phase = "crawl"
    started = t0 = time.perf_counter()
    existing = pipeline.catalog.documents_for_source(source)
    report.seconds["list"] += time.perf_counter() - t0
    if pipeline.catalog.embedding_model() is None:
        pipeline.catalog.set_embedding_model(pipeline.embedder.name, pipeline.embedder.dimension)
    writer = BatchWriter(pipeline, report, IngestProgress(total_files=len(existing)), progress)
    state = writer.state
    present: set[str] = set()
    iterator = iter(rows)
    while True:
        pipeline.phase = "crawl"
        t0 = time.perf_counter()
        row = next(iterator, None)
        report.seconds["read"] += time.perf_counter() - t0
        if row is None:
            break
        report.bodies_read += 1
        present.add(row.doc_id)
        state.current = row.doc_id
        content_hash = row.content_hash
        token = f"row:{content_hash}"
        old = existing.get(row.doc_id)
        if old is not None and old.content_hash == content_hash:
            report.unchanged += 1
            writer.file_done()
            continue
        pipeline.phase = "extract"
        document = ExtractedDocument(
            row.doc_id,
            tuple(Block(BlockKind.PARAGRAPH, p) for p in _paragraphs(row.text)),
            "text/plain",
        )
        entry = FileEntry(row.doc_id, row.doc_id, len(row.text.encode()), token)
        pipeline.phase = "chunk"
        prepared = prepare_document(rows_spec, document)
        for phase, seconds in prepared.seconds.items():
            report.seconds[phase] += seconds
        writer.add(Pending(entry, old, content_hash, prepared, row.doc_id, row.origin))
    writer.flush()
    pipeline.delete_absent(report, existing, present.__contains__)
    pipeline.catalog.mark_indexed(source)
    writer.filler.drain()  # the rows written pending (and any an interrupted build left)
    report.wall_seconds = time.perf_counter() - started
    return report


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs of a row value, whitespace collapsed."""
    parts = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return [p for p in parts if p]
