"""The incremental ingest pipeline for one document folder.

For every file: an unchanged change token (ETag or size + mtime) skips it without reading;
otherwise the bytes are hashed and an unchanged hash only refreshes the token. Changed and
new files are extracted, chunked and embedded (reusing the vectors of chunks whose embedded
text did not change) and written in one transaction each; files gone from the folder are
deleted. A file that cannot be read or extracted is recorded with its reason and skipped;
whatever was indexed for it before stays searchable.

Table rows (``natural_language`` columns) go through :meth:`IngestPipeline.index_rows`: one
document per row, incremental by content hash, rows gone from the table are deleted.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from docgraph.config import LoaderSettings
from docgraph.errors import EmbeddingModelMismatch, ExtractionError, SourceError
from docgraph.graph.extract import EntityExtractor
from docgraph.ingest.chunk import chunk_document
from docgraph.ingest.embed import Embedder
from docgraph.ingest.embed_cache import text_hash
from docgraph.ingest.extract import extract
from docgraph.model import (
    Block,
    BlockKind,
    ChunkDraft,
    DocumentRecord,
    ExtractedDocument,
    RowOrigin,
    SourceRecord,
)
from docgraph.sources.folder import FileEntry, FolderCrawler
from docgraph.sources.rows import RowDocument
from docgraph.sources.urn import document_id
from docgraph.store.base import Catalog, DocumentWrite

log = logging.getLogger(__name__)

ProgressCallback = Callable[["IngestProgress"], None]


@dataclass
class IngestProgress:
    """Running counts, passed to the progress callback after every document."""

    total_files: int = 0
    done_files: int = 0
    chunks_written: int = 0
    current: str = ""


@dataclass
class IngestReport:
    """What one build of one folder did, with timings split by phase (seconds)."""

    source: SourceRecord
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    bodies_read: int = 0
    failed_phases: dict[str, str] = field(default_factory=dict)  # path -> phase it failed in
    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("list", "read", "extract", "chunk", "entities", "embed", "store"), 0.0
        )
    )

    @property
    def total_seconds(self) -> float:
        """Wall time of all phases."""
        return sum(self.seconds.values())


@dataclass
class _Pending:
    entry: FileEntry
    existing: DocumentRecord | None
    content_hash: str
    document: ExtractedDocument
    chunks: list[ChunkDraft]
    breadcrumbs: list[str]
    embedded_texts: list[str]
    doc_id: str | None = None
    origin: RowOrigin | None = None


def check_embedding_model(catalog: Catalog, embedder: Embedder) -> None:
    """Refuse to mix models: the index's recorded model must be the configured one."""
    recorded = catalog.embedding_model()
    if recorded is None:
        return
    name, dimension = recorded
    if name != embedder.name or dimension != embedder.dimension:
        raise EmbeddingModelMismatch(
            f"this index was built with embedding model {name!r} ({dimension}-d) but "
            f"{embedder.name!r} ({embedder.dimension}-d) is configured; keep embed.model = "
            f"{name!r}, or rebuild every vector with `docgraph reindex --full` "
            "(re-embeds the whole corpus)"
        )


class IngestPipeline:
    """Indexes document folders into a :class:`Catalog` with an :class:`Embedder`."""

    def __init__(
        self,
        catalog: Catalog,
        embedder: Embedder,
        loader: LoaderSettings,
        embed_batch_chunks: int = 256,
        extractor: EntityExtractor | None = None,
    ) -> None:
        self.catalog = catalog
        self.embedder = embedder
        self.loader = loader
        self.embed_batch_chunks = embed_batch_chunks
        self.extractor = extractor
        self.phase = "crawl"  # the phase in progress, for attributing an escaping error

    def index_source(
        self,
        source: SourceRecord,
        progress: ProgressCallback | None = None,
        crawler: FolderCrawler | None = None,
    ) -> IngestReport:
        """Bring the index of one registered folder up to date with the folder.

        ``crawler`` (default: one without storage options) lists and reads the folder."""
        check_embedding_model(self.catalog, self.embedder)
        report = IngestReport(source=source)
        started = time.perf_counter()
        self.phase = "crawl"
        crawler = crawler or FolderCrawler(source.urn, self.loader.include)
        entries = list(crawler.list_files())  # raises SourceError: nothing is changed then
        existing = self.catalog.documents_for_source(source)
        report.seconds["list"] = time.perf_counter() - started
        if self.catalog.embedding_model() is None:
            self.catalog.set_embedding_model(self.embedder.name, self.embedder.dimension)

        state = IngestProgress(total_files=len(entries))
        batch: list[_Pending] = []
        batch_chunks = 0
        for entry in entries:
            state.current = entry.relative_path
            pending = self._prepare(crawler, entry, existing.get(entry.relative_path), report)
            if pending is not None:
                batch.append(pending)
                batch_chunks += len(pending.chunks)
                if batch_chunks >= self.embed_batch_chunks:
                    self._flush(batch, report, state, progress)
                    batch, batch_chunks = [], 0
            else:
                state.done_files += 1
                if progress:
                    progress(state)
        self._flush(batch, report, state, progress)

        present = {e.relative_path for e in entries}
        t0 = time.perf_counter()
        self.phase = "store"
        for path, document in sorted(existing.items()):
            if path not in present:
                self.catalog.delete_document(document)
                self.catalog.clear_failure(source, path)
                report.removed.append(path)
        report.seconds["store"] += time.perf_counter() - t0
        mark = getattr(self.catalog, "mark_indexed", None)
        if callable(mark):
            mark(source)
        return report

    def _prepare(
        self,
        crawler: FolderCrawler,
        entry: FileEntry,
        existing: DocumentRecord | None,
        report: IngestReport,
    ) -> _Pending | None:
        """Read, hash, extract and chunk one file; None when nothing needs writing."""
        self.phase = "extract"  # a file over the size limit is skipped like an unreadable one
        if existing is not None and existing.change_token == entry.change_token \
                and existing.content_hash:
            report.unchanged += 1
            return None
        if entry.size > self.loader.max_file_bytes:
            self._fail(report, entry, f"file is {entry.size} bytes, over loader.max_file_bytes "
                       f"({self.loader.max_file_bytes})")
            return None
        t0 = time.perf_counter()
        self.phase = "crawl"
        try:
            data = crawler.read(entry)
        except SourceError as exc:
            self._fail(report, entry, str(exc))
            return None
        finally:
            report.seconds["read"] += time.perf_counter() - t0
        report.bodies_read += 1
        content_hash = hashlib.sha256(data).hexdigest()
        if existing is not None and existing.content_hash == content_hash:
            self.catalog.touch_document(existing, entry.change_token)
            self.catalog.clear_failure(report.source, entry.relative_path)  # e.g. a past fetch
            report.unchanged += 1
            return None
        t0 = time.perf_counter()
        self.phase = "extract"
        try:
            document = extract(data, entry.relative_path)
        except ExtractionError as exc:
            self._fail(report, entry, str(exc))
            return None
        finally:
            report.seconds["extract"] += time.perf_counter() - t0
        return self._chunked(entry, existing, content_hash, document, report)

    def _chunked(
        self,
        entry: FileEntry,
        existing: DocumentRecord | None,
        content_hash: str,
        document: ExtractedDocument,
        report: IngestReport,
    ) -> _Pending:
        t0 = time.perf_counter()
        self.phase = "chunk"
        chunks = chunk_document(document, self.embedder.count_tokens, self.loader.chunk_tokens)
        breadcrumbs = [c.breadcrumb(document.title) for c in chunks]
        embedded = [
            f"{crumb} {c.text}" if self.loader.breadcrumb else c.text
            for crumb, c in zip(breadcrumbs, chunks, strict=True)
        ]
        report.seconds["chunk"] += time.perf_counter() - t0
        return _Pending(entry, existing, content_hash, document, chunks, breadcrumbs, embedded)

    def index_rows(
        self,
        source: SourceRecord,
        rows: Iterable[RowDocument],
        progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """Bring the row documents of one tagged column up to date with its table.

        ``rows`` is every current row (iterated once). A row whose text hash is unchanged is
        neither re-chunked nor re-embedded; documents of rows no longer present are deleted.
        If iterating ``rows`` fails, the error propagates before anything is deleted.
        """
        check_embedding_model(self.catalog, self.embedder)
        report = IngestReport(source=source)
        self.phase = "crawl"
        t0 = time.perf_counter()
        existing = self.catalog.documents_for_source(source)
        report.seconds["list"] += time.perf_counter() - t0
        if self.catalog.embedding_model() is None:
            self.catalog.set_embedding_model(self.embedder.name, self.embedder.dimension)
        state = IngestProgress(total_files=len(existing))
        present: set[str] = set()
        batch: list[_Pending] = []
        batch_chunks = 0
        iterator = iter(rows)
        while True:
            self.phase = "crawl"
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
                state.done_files += 1
                if progress:
                    progress(state)
                continue
            self.phase = "extract"
            document = ExtractedDocument(
                row.doc_id,
                tuple(Block(BlockKind.PARAGRAPH, p) for p in _paragraphs(row.text)),
                "text/plain",
            )
            entry = FileEntry(row.doc_id, row.doc_id, len(row.text.encode()), token)
            pending = self._chunked(entry, old, content_hash, document, report)
            pending.doc_id = row.doc_id
            pending.origin = row.origin
            batch.append(pending)
            batch_chunks += len(pending.chunks)
            if batch_chunks >= self.embed_batch_chunks:
                self._flush(batch, report, state, progress)
                batch, batch_chunks = [], 0
        self._flush(batch, report, state, progress)
        t0 = time.perf_counter()
        self.phase = "store"
        for path, document_record in sorted(existing.items()):
            if path not in present:
                self.catalog.delete_document(document_record)
                report.removed.append(path)
        report.seconds["store"] += time.perf_counter() - t0
        mark = getattr(self.catalog, "mark_indexed", None)
        if callable(mark):
            mark(source)
        return report

    def _fail(self, report: IngestReport, entry: FileEntry, reason: str) -> None:
        log.warning("skipped %s/%s: %s", report.source.urn, entry.relative_path, reason)
        report.failed.append((entry.relative_path, reason))
        report.failed_phases[entry.relative_path] = self.phase
        self.catalog.record_failure(report.source, entry.relative_path, reason)

    def _flush(
        self,
        batch: list[_Pending],
        report: IngestReport,
        state: IngestProgress,
        progress: ProgressCallback | None,
    ) -> None:
        """Embed the chunks of a batch of documents at once, then write them all in one
        transaction (each document atomic on its own)."""
        if not batch:
            return
        source = report.source
        t0 = time.perf_counter()
        self.phase = "embed"
        hashes = [[text_hash(t) for t in pending.embedded_texts] for pending in batch]
        reused: list[dict[str, np.ndarray]] = []
        to_embed: list[str] = []
        for pending, doc_hashes in zip(batch, hashes, strict=True):
            found: dict[str, np.ndarray] = {}
            if pending.existing is not None:
                found = dict(self.catalog.reusable_vectors(
                    source.namespace, pending.existing.doc_id, doc_hashes))
            reused.append(found)
            to_embed.extend(t for t, h in zip(pending.embedded_texts, doc_hashes, strict=True)
                            if h not in found)
        report.seconds["store"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        fresh = self.embedder.embed_documents(to_embed) if to_embed else None
        report.seconds["embed"] += time.perf_counter() - t0
        report.chunks_embedded += len(to_embed)

        t0 = time.perf_counter()
        self.phase = "entities"
        links = [[self.extractor.links(c.text) for c in pending.chunks]
                 if self.extractor is not None else [] for pending in batch]
        report.seconds["entities"] += time.perf_counter() - t0

        t0 = time.perf_counter()
        self.phase = "store"
        writes: list[DocumentWrite] = []
        cursor = 0
        for pending, found, doc_hashes, doc_links in zip(batch, reused, hashes, links,
                                                         strict=True):
            if not found and fresh is not None:  # nothing reused: a slice, no copy
                vectors = np.asarray(fresh[cursor:cursor + len(doc_hashes)], dtype=np.float32)
                cursor += len(doc_hashes)
            else:
                rows = []
                for h in doc_hashes:
                    if h in found:
                        rows.append(found[h])
                        report.chunks_reused += 1
                    else:
                        assert fresh is not None
                        rows.append(fresh[cursor])
                        cursor += 1
                vectors = (np.stack(rows).astype(np.float32) if rows
                           else np.zeros((0, self.embedder.dimension), dtype=np.float32))
            path = pending.entry.relative_path
            writes.append(DocumentWrite(
                source=source,
                path=path,
                doc_id=pending.doc_id or document_id(source.urn, path),
                title=pending.document.title,
                content_hash=pending.content_hash,
                change_token=pending.entry.change_token,
                media_type=pending.document.media_type,
                chunks=pending.chunks,
                breadcrumbs=pending.breadcrumbs,
                embedded_texts=pending.embedded_texts,
                vectors=vectors,
                entity_links=doc_links,
                origin=pending.origin,
            ))
        self.catalog.write_documents(writes)  # one transaction, each document atomic
        report.seconds["store"] += time.perf_counter() - t0
        for pending in batch:
            path = pending.entry.relative_path
            (report.updated if pending.existing is not None else report.added).append(path)
            report.chunks_written += len(pending.chunks)
            state.done_files += 1
            state.chunks_written += len(pending.chunks)
            if progress:
                progress(state)


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs of a row value, whitespace collapsed."""
    import re

    parts = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return [p for p in parts if p]
