"""The build's write batches: prepared documents are collected and written in one
transaction, each document (a file with its attachments) atomic on its own, reusing the
vectors of chunk texts the index already holds. The other chunks are written *pending*
(searchable by BM25 at once) and embedded behind in large batches
(:mod:`docgraph.ingest.embed_behind`); with ``pipeline.embed_behind`` off (an external chunk
index that follows only embedded rows, or the benchmark's old path) the batch is embedded
before it is written. A document the store refuses fails its file alone
(:mod:`docgraph.ingest.failed_writes`). :class:`BatchWriter` commits at least every
:data:`COMMIT_EVERY_DOCUMENTS` documents, :data:`COMMIT_EVERY_CHUNKS` chunks or
:data:`COMMIT_EVERY_SECONDS`, so an interrupted build keeps what it committed."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from docgraph.ingest.embed_behind import VectorFiller
from docgraph.ingest.failed_writes import write_batch
from docgraph.ingest.prepare import PreparedDocument
from docgraph.ingest.report import IngestProgress, IngestReport, ProgressCallback
from docgraph.model import Access, DocumentRecord, RowOrigin
from docgraph.sources.folder import FileEntry
from docgraph.sources.urn import document_id
from docgraph.store.base import DocumentWrite
from docgraph.telemetry import span
from docgraph.text import text_hash

if TYPE_CHECKING:
    from docgraph.ingest.pipeline import IngestPipeline

# Finished documents are committed at least every this many documents, chunks or seconds
# (whichever comes first), so a build that is interrupted (Ctrl-C) or killed loses at most
# the batch in flight and the next build continues after the documents already committed.
# Embedders batch internally (MiniLM: 32 passages, 512 padded tokens), so a smaller commit batch
# costs little embedding throughput; the commit itself is a few milliseconds.
COMMIT_EVERY_DOCUMENTS = 16
COMMIT_EVERY_CHUNKS = 64
COMMIT_EVERY_SECONDS = 5.0


@dataclass
class Pending:
    """A prepared file (or table row) waiting in a batch: what it replaces, its content
    hash, its document id and origin when it is a row."""

    entry: FileEntry
    existing: DocumentRecord | None
    content_hash: str
    prepared: PreparedDocument
    doc_id: str | None = None
    origin: RowOrigin | None = None
    #: Who may read it (:mod:`docgraph.ingest.access`); its attachments follow it.
    access: Access = None


class BatchWriter:
    """Collects prepared documents until ``embed_batch_chunks`` chunks,
    :data:`COMMIT_EVERY_DOCUMENTS` documents or :data:`COMMIT_EVERY_SECONDS` since the
    first of them, then embeds the batch at once (reusing vectors of unchanged chunk texts)
    and writes it in one transaction (committed: an interrupted build keeps it), each
    document atomic on its own."""

    def __init__(self, pipeline: IngestPipeline, report: IngestReport, state: IngestProgress,
                 progress: ProgressCallback | None) -> None:
        self.pipeline = pipeline
        self.report = report
        self.state = state
        self.progress = progress
        self.batch: list[Pending] = []
        self.batch_chunks = 0
        self.batch_started = 0.0  # time.monotonic() when the batch's first document came
        self.filler = VectorFiller(pipeline, report)

    def file_done(self) -> None:
        """Count a finished file (written, unchanged or failed) and report progress; writes
        a waiting batch that is due."""
        self.state.done_files += 1
        if self.progress:
            self.progress(self.state)
        if self.batch and time.monotonic() - self.batch_started >= COMMIT_EVERY_SECONDS:
            self.flush()

    def add(self, pending: Pending) -> None:
        """Queue one document; writes the batch once it is full or due."""
        if not self.batch:
            self.batch_started = time.monotonic()
        self.batch.append(pending)
        self.batch_chunks += pending.prepared.all_chunks()
        if (self.batch_chunks >= self.pipeline.embed_batch_chunks
                or len(self.batch) >= COMMIT_EVERY_DOCUMENTS
                or time.monotonic() - self.batch_started >= COMMIT_EVERY_SECONDS):
            self.flush()

    def flush(self) -> None:
        """Embed and write every queued document."""
        batch, self.batch, self.batch_chunks = self.batch, [], 0
        if not batch:
            return
        pipeline, report = self.pipeline, self.report
        catalog, embedder = pipeline.catalog, pipeline.embedder
        source = report.source
        t0 = time.perf_counter()
        pipeline.phase = "embed"
        # Each file's document, then its attachments (documents of their own): one unit per
        # document, embedded together, written as one atomic write per file.
        units = [unit for pending in batch for unit in _documents_of(pending, source.urn)]
        hashes = [[text_hash(t) for t in u.prepared.embedded_texts] for u in units]
        reused: list[dict[str, np.ndarray]] = []
        to_embed: list[str] = []
        for (pending, doc_id, _, _, prepared), doc_hashes in zip(units, hashes, strict=True):
            found: dict[str, np.ndarray] = {}
            if pending.existing is not None:
                found = dict(catalog.reusable_vectors(source.namespace, doc_id, doc_hashes))
            reused.append(found)
            to_embed.extend(t for t, h in zip(prepared.embedded_texts, doc_hashes,
                                              strict=True) if h not in found)
        report.seconds["store"] += time.perf_counter() - t0
        behind = pipeline.embed_behind
        fresh = None
        if to_embed and not behind:
            t0 = time.perf_counter()
            with span("build.embed", passages=len(to_embed)):
                fresh = embedder.embed_documents(to_embed)
            report.seconds["embed"] += time.perf_counter() - t0
            report.passages_embedded += len(to_embed)
        elif to_embed:  # written pending, embedded behind (VectorFiller)
            fresh = np.zeros((len(to_embed), embedder.dimension), dtype=np.float32)

        t0 = time.perf_counter()
        pipeline.phase = "store"
        unit_writes: list[DocumentWrite] = []
        unit_pending: list[int] = []  # chunks each unit writes pending
        cursor = 0
        for unit, found, doc_hashes in zip(units, reused, hashes, strict=True):
            if not found and fresh is not None:  # nothing reused: a slice, no copy
                vectors = np.asarray(fresh[cursor:cursor + len(doc_hashes)], dtype=np.float32)
                cursor += len(doc_hashes)
            else:
                rows = []
                for h in doc_hashes:
                    if h in found:
                        rows.append(found[h])
                    else:
                        assert fresh is not None
                        rows.append(fresh[cursor])
                        cursor += 1
                vectors = (np.stack(rows).astype(np.float32) if rows
                           else np.zeros((0, embedder.dimension), dtype=np.float32))
            missing = [h not in found for h in doc_hashes] if behind else None
            unit_pending.append(sum(missing) if missing else 0)
            pending, prepared = unit.pending, unit.prepared
            is_file = prepared is pending.prepared
            unit_writes.append(DocumentWrite(
                source=source,
                path=unit.path,
                doc_id=unit.doc_id,
                title=prepared.document.title,
                content_hash=unit.content_hash,
                change_token=pending.entry.change_token,
                media_type=prepared.document.media_type,
                chunks=prepared.chunks,
                breadcrumbs=prepared.breadcrumbs,
                embedded_texts=prepared.embedded_texts,
                vectors=vectors,
                entity_links=prepared.links,
                origin=pending.origin if is_file else None,
                lexical_terms=prepared.lexical,
                metadata=prepared.document.metadata,
                line_hashes=prepared.line_hashes,
                lines_dropped=prepared.lines_dropped,
                access=pending.access,
                language=prepared.language,
                missing=missing,
            ))
        writes: list[DocumentWrite] = []
        spans: list[range] = []  # each file's units (its document, then its attachments)
        start = 0
        for pending in batch:  # a file's write carries its attachments' writes
            end = start + 1 + len(pending.prepared.attachments)
            spans.append(range(start, end))
            first, rest = unit_writes[start], unit_writes[start + 1:end]
            writes.append(replace(first, attachments=rest) if rest else first)
            start = end
        with span("build.write", documents=len(writes)):
            # one transaction, each document atomic; a document the store refuses becomes
            # its file's failure, the others are written (docgraph.ingest.failed_writes)
            refusals = write_batch(catalog, writes)
        report.seconds["store"] += time.perf_counter() - t0
        pending_chunks = 0
        for pending, file_units, refusal in zip(batch, spans, refusals, strict=True):
            path = pending.entry.relative_path
            if refusal is not None:  # keeps its old version, if it had one, under the
                existing = pending.existing  # permission set the new one would have had
                if existing is not None and existing.access != pending.access:
                    pipeline.access.changes[existing.id] = pending.access
                pipeline.fail(report, path, refusal, "store", access=pending.access)
                self.file_done()
                continue
            for i in file_units:
                report.count_write(units[i].doc_id, hashes[i], set(reused[i]))
                pending_chunks += unit_pending[i]
            (report.updated if pending.existing is not None else report.added).append(path)
            self.state.chunks_written = report.chunks_written
            self.file_done()
        if pending_chunks:
            self.filler.wrote(pending_chunks)


class _Unit(NamedTuple):
    """One document of a pending file: the file's own, or one of its attachments."""

    pending: Pending
    doc_id: str
    path: str
    content_hash: str
    prepared: PreparedDocument


def _documents_of(pending: Pending, urn: str) -> list[_Unit]:
    """A pending file's document, then each of its attachments' (path and id
    ``<file>/<attachment>``, content hash of the attachment's bytes)."""
    entry = pending.entry
    return [_Unit(pending, pending.doc_id or document_id(urn, entry.name_path),
                  entry.relative_path, pending.content_hash, pending.prepared)] + [
        _Unit(pending, document_id(urn, f"{entry.name_path}/{a.name}"),
              f"{entry.relative_path}/{a.name}", a.content_hash, a.prepared)
        for a in pending.prepared.attachments]

