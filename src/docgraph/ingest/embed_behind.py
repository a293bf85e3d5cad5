"""Embedding behind the writes: a build commits each document's chunks as soon as they are
prepared (searchable by BM25 at once, *pending* a vector: :mod:`docgraph.store.pending`) and
embeds the pending chunks of its source in large batches across documents, as they pile up
and again at its end. The model sorts each batch by length itself (its padded-token
budget), so a large batch is what lets it do that across documents instead of within a
commit of a few; texts it already embedded in the batch (equal chunk texts) are embedded
once. A build interrupted while chunks are pending leaves them searchable by BM25; the next
build of the source embeds exactly those (nothing is extracted again)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from docgraph.ingest.prepare import embedding_input
from docgraph.store.pending import PendingChunk, PendingVectors
from docgraph.telemetry import span
from docgraph.text import text_hash

if TYPE_CHECKING:
    from docgraph.ingest.pipeline import IngestPipeline
    from docgraph.ingest.report import IngestReport

#: Pending chunks embedded per model call: large enough for the model's length sorting to
#: pay across documents (MiniLM packs 512 padded tokens a forward pass), small enough that
#: the dense lane fills in steadily during a long build.
FILL_BATCH = 256


def embedded_text(chunk: PendingChunk, breadcrumb: bool) -> str:
    """The text a pending chunk's vector is computed from: what its hash was stored for
    (breadcrumb + text, or the text alone; the other form when ``loader.breadcrumb``
    changed since it was written)."""
    first = embedding_input(chunk.breadcrumb, chunk.text, breadcrumb)
    if text_hash(first) == chunk.embed_hash:
        return first
    other = embedding_input(chunk.breadcrumb, chunk.text, not breadcrumb)
    return other if text_hash(other) == chunk.embed_hash else first


class VectorFiller:
    """Embeds the pending chunks of one build's source and stores their vectors."""

    def __init__(self, pipeline: IngestPipeline, report: IngestReport) -> None:
        self.pipeline = pipeline
        self.report = report
        self.waiting = 0  # chunks written pending since the last fill

    @property
    def catalog(self) -> PendingVectors:
        """The pipeline's catalog, as a store of pending chunks."""
        return self.pipeline.catalog

    def wrote(self, pending: int) -> None:
        """Count chunks just written pending; embeds a batch once :data:`FILL_BATCH` wait."""
        self.waiting += pending
        if self.waiting >= FILL_BATCH:
            self.fill(FILL_BATCH)

    def drain(self) -> None:
        """Embed every pending chunk of the source (this build's and any an interrupted
        build left)."""
        self.fill(1)

    def fill(self, at_least: int) -> None:
        """Embed pending chunks, :data:`FILL_BATCH` at a time, while at least ``at_least``
        wait."""
        source_id = self.report.source.id
        while True:
            t0 = time.perf_counter()
            chunks = self.catalog.pending_chunks(source_id, FILL_BATCH)
            self.report.seconds["store"] += time.perf_counter() - t0
            if len(chunks) < at_least or not chunks:
                self.waiting = len(chunks)
                return
            self._embed(chunks)

    def _embed(self, chunks: list[PendingChunk]) -> None:
        """Embed one batch (each distinct text once) and store the vectors."""
        pipeline, report = self.pipeline, self.report
        pipeline.phase = "embed"
        breadcrumb = pipeline.loader.breadcrumb
        texts = [embedded_text(c, breadcrumb) for c in chunks]
        distinct = list(dict.fromkeys(texts))
        t0 = time.perf_counter()
        with span("build.embed", passages=len(distinct)):
            vectors = pipeline.embedder.embed_documents(distinct)
        report.seconds["embed"] += time.perf_counter() - t0
        report.passages_embedded += len(distinct)
        by_text = dict(zip(distinct, vectors, strict=True))
        t0 = time.perf_counter()
        pipeline.phase = "store"
        with span("build.fill", chunks=len(chunks)):
            report.pending_filled += self.catalog.fill_vectors(
                [(c.rowid, by_text[t]) for c, t in zip(chunks, texts, strict=True)])
        report.seconds["store"] += time.perf_counter() - t0
