"""The incremental ingest pipeline for one document folder.

For every file: an unchanged change token (ETag or size + mtime) skips it without reading;
otherwise the bytes are hashed and an unchanged hash only refreshes the token. Changed and
new files are extracted, chunked and embedded (reusing the vectors of chunks whose embedded
text did not change) and written in one transaction each; files gone from the folder,
including those that vanish while the build runs, are deleted. A file that cannot be read or
extracted, is too large, or is not a regular file (a symlink, a FIFO) is recorded with its
reason and skipped; whatever was indexed for it before stays searchable. A build that
completes leaves exactly this build's failure records: those of files that now index or
are gone are cleared.

One file can give several documents: a mail's attachments are documents of their own, path
``<mail>/<attachment>`` (see :class:`~docgraph.store.base.DocumentWrite`): written in the
mail's write, with its change token, deleted with it or when they leave it. A listed file
whose path is an attachment's wins that path (object stores can hold ``x.eml`` and
``x.eml/a.pdf`` both): the mail is then read again without that attachment, and again once
the file is gone.

Lines repeated across a large share of the source's documents (legal footers; see
:func:`docgraph.ingest.boilerplate.repeated_floor`) are left out of every document: files
are prepared without the lines repeated among the stored documents, and at the end of the
build the files whose documents do not drop exactly the lines repeated now are read again.

Table rows (``natural_language`` columns) go through :meth:`IngestPipeline.index_rows`: one
document per row, incremental by content hash, rows gone from the table are deleted.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from docgraph.config import LoaderSettings
from docgraph.embedding.embedders import Embedder
from docgraph.errors import (
    BuildInterrupted,
    EmbeddingModelMismatch,
    ExtractionError,
    FileSkipped,
    SourceError,
    SourceFileVanished,
)
from docgraph.graph.extract import EntityExtractor
from docgraph.ingest.boilerplate import repeated_floor
from docgraph.ingest.prepare import (
    PreparedDocument,
    PrepareSpec,
    prepare_bytes,
    prepare_document,
)
from docgraph.ingest.workers import (
    PrepareCrash,
    PrepareFailure,
    PrepareOutcome,
    PreparePool,
    portable_token_counter,
    refuse_in_worker_bootstrap,
    worker_count,
)
from docgraph.model import (
    Block,
    BlockKind,
    DocumentRecord,
    ExtractedDocument,
    RowOrigin,
    SourceRecord,
)
from docgraph.sources.folder import FileEntry, FolderCrawler
from docgraph.sources.rows import RowDocument
from docgraph.sources.urn import document_id
from docgraph.store.base import Catalog, DocumentWrite
from docgraph.text import text_hash

log = logging.getLogger(__name__)

ProgressCallback = Callable[["IngestProgress"], None]

# Worker processes start only once this many files of one build need extracting: a small
# incremental build never pays their start-up (~1 s), a bulk build gains ~2x on 2 cores.
PARALLEL_AFTER_FILES = 32

# Finished documents are committed at least every this many documents, chunks or seconds
# (whichever comes first), so a build that is interrupted (Ctrl-C) or killed loses at most
# the batch in flight and the next build continues after the documents already committed.
# Embedders batch internally (32 passages for the local models), so a smaller commit batch
# costs little embedding throughput; the commit itself is a few milliseconds.
COMMIT_EVERY_DOCUMENTS = 16
COMMIT_EVERY_CHUNKS = 64
COMMIT_EVERY_SECONDS = 5.0


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
    vanished: list[str] = field(default_factory=list)  # listed, gone when read: deleted
    # The chunks the written documents hold now (== what the index holds for them), split
    # into those whose vectors this build computed and those it reused from before it:
    # chunks_embedded + chunks_reused == chunks_written. A document this build writes twice
    # (the repeated-lines pass prepares again documents written earlier in the build,
    # always on a first build) counts once, with its final chunks; its first write's vectors
    # count as embedded, not as reused. (These used to be summed over every write, so a
    # first build reported more chunks written than the index held, and "reused" vectors it
    # had embedded itself minutes before.)
    chunks_written: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0
    #: Passages sent to the embedding model, the repeated-lines pass's included (the work
    #: done; at least ``chunks_embedded``).
    passages_embedded: int = 0
    bodies_read: int = 0
    workers: int = 1  # processes that prepared documents (1 = inline)
    wall_seconds: float = 0.0  # the whole build, start to end
    failed_phases: dict[str, str] = field(default_factory=dict)  # path -> phase it failed in
    # Files of the folder matching no loader.include pattern, by type ("*.rst": 8).
    not_included: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("list", "read", "extract", "chunk", "entities", "embed", "store"), 0.0
        )
    )

    # doc id -> (chunks, embedded by this build, hashes reused from before this build) of
    # the document's latest write in this build.
    _counted: dict[str, tuple[int, int, frozenset[str]]] = field(default_factory=dict,
                                                                  repr=False)

    def count_write(self, doc_id: str, hashes: list[str], found: set[str]) -> None:
        """Count one document's write: ``hashes`` of its chunks, ``found`` those whose
        vectors were reused from the index (of its earlier write in this build, or from
        before the build). A second write of a document replaces its first's counts."""
        prior = self._counted.get(doc_id)
        before = frozenset(found) if prior is None else frozenset(found) & prior[2]
        reused = sum(1 for h in hashes if h in before)
        if prior is not None:
            self.chunks_written -= prior[0]
            self.chunks_embedded -= prior[1]
            self.chunks_reused -= prior[0] - prior[1]
        self._counted[doc_id] = (len(hashes), len(hashes) - reused,
                                 before if before else frozenset())
        self.chunks_written += len(hashes)
        self.chunks_embedded += len(hashes) - reused
        self.chunks_reused += reused

    @property
    def total_seconds(self) -> float:
        """Time of all phases (with worker processes, their busy time is summed in)."""
        return sum(self.seconds.values())

    def not_included_summary(self, top: int = 3) -> str | None:
        """How many files were not indexed because no ``loader.include`` pattern matches
        them, with the ``top`` most common types: ``12 files not indexed: not in
        loader.include (*.rst: 8, *.adoc: 3, no extension: 1)``; None when there were
        none."""
        total = sum(self.not_included.values())
        if not total:
            return None
        ranked = sorted(self.not_included.items(), key=lambda item: (-item[1], item[0]))
        shown = [f"{kind}: {count}" for kind, count in ranked[:top]]
        if len(ranked) > top:
            others = sum(count for _, count in ranked[top:])
            shown.append(f"others: {others}")
        noun = "file" if total == 1 else "files"
        return f"{total} {noun} not indexed: not in loader.include ({', '.join(shown)})"


@dataclass
class _Pending:
    entry: FileEntry
    existing: DocumentRecord | None
    content_hash: str
    prepared: PreparedDocument
    doc_id: str | None = None
    origin: RowOrigin | None = None


@dataclass
class _Fetched:
    """A changed file's bytes, read and hashed, waiting to be prepared."""

    entry: FileEntry
    existing: DocumentRecord | None
    content_hash: str
    data: bytes


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
    """Indexes document folders into a :class:`Catalog` with an :class:`Embedder`.

    ``workers`` (``loader.workers``; 0 = one per core) processes prepare documents of a bulk
    build while this process embeds and writes; 1 prepares everything inline. Finished
    documents are embedded and committed in batches of at most ``embed_batch_chunks``
    chunks, :data:`COMMIT_EVERY_DOCUMENTS` documents or :data:`COMMIT_EVERY_SECONDS`.
    """

    def __init__(
        self,
        catalog: Catalog,
        embedder: Embedder,
        loader: LoaderSettings,
        embed_batch_chunks: int = COMMIT_EVERY_CHUNKS,
        extractor: EntityExtractor | None = None,
    ) -> None:
        self.catalog = catalog
        self.embedder = embedder
        self.loader = loader
        self.embed_batch_chunks = embed_batch_chunks
        self.extractor = extractor
        self.workers = worker_count(loader.workers)
        self.phase = "crawl"  # the phase in progress, for attributing an escaping error
        self._listed: set[str] = set()  # the relative paths of the build's listed files
        self._spec = PrepareSpec(
            loader, embedder.count_tokens, extractor,
            lexical=bool(getattr(catalog, "stores_bm25_terms", False)),
        )

    def _worker_spec(self) -> PrepareSpec | None:
        """The spec with a token counter worker processes can load, or None (inline)."""
        if self.workers < 2:
            return None
        counter = portable_token_counter(self.embedder)
        if counter is None:
            return None
        return replace(self._spec, count_tokens=counter)

    def index_source(
        self,
        source: SourceRecord,
        progress: ProgressCallback | None = None,
        crawler: FolderCrawler | None = None,
    ) -> IngestReport:
        """Bring the index of one registered folder up to date with the folder.

        ``crawler`` (default: one without storage options) lists and reads the folder."""
        refuse_in_worker_bootstrap()
        check_embedding_model(self.catalog, self.embedder)
        report = IngestReport(source=source)
        started = time.perf_counter()
        self.phase = "crawl"
        crawler = crawler or FolderCrawler(source.urn, self.loader.include)
        entries = list(crawler.list_files())  # raises SourceError: nothing is changed then
        report.not_included = dict(crawler.not_included)
        every = self.catalog.documents_for_source(source)
        # Attachments (a mail's, path <mail>/<name>) are written and deleted with their mail.
        existing = {path: d for path, d in every.items() if d.parent is None}
        self._listed = {e.relative_path for e in entries}
        unread = tuple(folder + "/" for folder in crawler.unlisted)  # kept as they are
        reread, shadowing = _mails_to_read_again(existing, every, self._listed, unread)
        # Lines repeated across the source's documents (as stored) are left out of the
        # documents this build prepares; documents it does not read are checked at its end.
        self._spec = replace(self._spec, count_lines=True, repeated=frozenset(
            self.catalog.line_counts(source, repeated_floor(len(every)))))
        report.seconds["list"] = time.perf_counter() - started
        if self.catalog.embedding_model() is None:
            self.catalog.set_embedding_model(self.embedder.name, self.embedder.dimension)
        self.phase = "extract"  # skipped like a file that cannot be extracted, not a fetch
        for skipped in crawler.skipped:
            self._fail(report, skipped.relative_path, skipped.reason)
        entries = self._one_per_document_id(source, entries, existing, report)
        for path in shadowing:  # gone files whose paths their mail's attachments take back
            self.catalog.delete_document(existing.pop(path))
            report.removed.append(path)

        writer = _BatchWriter(self, report, IngestProgress(total_files=len(entries)), progress)
        try:
            self._visit(crawler, entries, existing, reread, writer, report)
            self._finish(crawler, entries, existing, report, progress)
        except KeyboardInterrupt as exc:
            # Ctrl-C: the batches committed so far stay; nothing not yet visited is deleted,
            # failures are not cleared and the source is not marked indexed, so the next
            # build continues where this one stopped (see COMMIT_EVERY_DOCUMENTS).
            kept = len(report.added) + len(report.updated)
            raise BuildInterrupted(kept, writer.state.done_files, writer.state.total_files,
                                   self.phase) from exc
        report.wall_seconds = time.perf_counter() - started
        return report

    def _visit(self, crawler: FolderCrawler, entries: list[FileEntry],
               existing: dict[str, DocumentRecord], reread: set[str], writer: _BatchWriter,
               report: IngestReport) -> None:
        """Fetch, prepare (inline, or in worker processes for a bulk build), embed and
        write every listed file, committing in bounded batches."""
        pool: PreparePool | None = None
        fetched_count = 0
        try:
            for entry in entries:
                writer.state.current = entry.relative_path
                fetched = self._fetch(crawler, entry, existing.get(entry.relative_path), report,
                                      force=entry.relative_path in reread)
                if fetched is None:
                    writer.file_done()
                    continue
                fetched_count += 1
                if pool is None and fetched_count > PARALLEL_AFTER_FILES:
                    spec = self._worker_spec()
                    if spec is not None:
                        pool = PreparePool(spec, self.workers)
                        report.workers = self.workers
                if pool is None:
                    self._take(writer, fetched, self._prepare_inline(fetched))
                else:
                    for done, outcome in pool.submit(fetched, entry.relative_path, fetched.data):
                        self._take(writer, done, outcome or self._prepare_inline(done))
            if pool is not None:
                for done, outcome in pool.drain():
                    self._take(writer, done, outcome or self._prepare_inline(done))
        finally:
            if pool is not None:
                pool.close()
        writer.flush()

    def _finish(self, crawler: FolderCrawler, entries: list[FileEntry],
                existing: dict[str, DocumentRecord], report: IngestReport,
                progress: ProgressCallback | None) -> None:
        """After every listed file was visited: delete the documents of files gone from the
        folder, re-prepare those whose repeated lines changed, clear stale failures and
        mark the source indexed."""
        source = report.source
        gone = set(report.vanished)
        present = {e.relative_path for e in entries if e.relative_path not in gone}
        unknown = tuple(folder + "/" for folder in crawler.unlisted)  # unread: keep as is
        t0 = time.perf_counter()
        self.phase = "store"
        for path, document in sorted(existing.items()):
            if path not in present and not path.startswith(unknown):
                self.catalog.delete_document(document)
                report.removed.append(path)
        report.seconds["store"] += time.perf_counter() - t0
        self._drop_repeated_lines(crawler, entries, report, progress)
        t0 = time.perf_counter()
        self._clear_stale_failures(source, report, unknown)
        report.seconds["store"] += time.perf_counter() - t0
        mark = getattr(self.catalog, "mark_indexed", None)
        if callable(mark):
            mark(source)

    def _drop_repeated_lines(self, crawler: FolderCrawler, entries: list[FileEntry],
                             report: IngestReport, progress: ProgressCallback | None) -> None:
        """Prepare again the files whose documents (or attachments) do not leave out exactly
        the lines now repeated across the source: the set counted at the build's start
        missed this build's documents (a first build of a folder counts none), or lines
        became or stopped being repeated as files came and went. Vectors of unchanged
        chunk texts are reused; in a build after which the set stays the same, no file is
        read here."""
        source = report.source
        self.phase = "store"
        documents = self.catalog.documents_for_source(source)
        repeated = frozenset(self.catalog.line_counts(source, repeated_floor(len(documents))))
        stale: set[str] = set()
        counted = self.catalog.line_fingerprints(source, repeated)
        for path, (hashes, dropped) in counted.items():
            if hashes & repeated != dropped and path in documents:
                stale.add(documents[path].parent or path)
        skip = set(report.vanished) | {p for p, _ in report.failed}
        redo = [e for e in entries if e.relative_path in stale and e.relative_path not in skip]
        if not redo:
            return
        self._spec = replace(self._spec, repeated=repeated)
        written = set(report.added) | set(report.updated)
        writer = _BatchWriter(self, report, IngestProgress(total_files=len(redo)), progress)
        for entry in redo:
            writer.state.current = entry.relative_path
            fetched = self._fetch(crawler, entry, documents.get(entry.relative_path), report,
                                  force=True)
            if fetched is None:
                writer.file_done()
                continue
            self._take(writer, fetched, self._prepare_inline(fetched))
        writer.flush()
        added = set(report.added)
        again = [p for p in report.updated if p not in added]
        report.unchanged -= len({p for p in again if p not in written})
        report.updated = list(dict.fromkeys(again))

    def _fetch(
        self,
        crawler: FolderCrawler,
        entry: FileEntry,
        existing: DocumentRecord | None,
        report: IngestReport,
        force: bool = False,
    ) -> _Fetched | None:
        """Read and hash one file; None when it is unchanged or cannot be read. ``force``
        reads and prepares it even when unchanged (a mail whose attachment's path a file
        took, or gave back)."""
        self.phase = "extract"  # a file over the size limit is skipped like an unreadable one
        if existing is not None and existing.change_token == entry.change_token \
                and existing.content_hash and not force:
            report.unchanged += 1
            return None
        if entry.size > self.loader.max_file_bytes:
            self._fail(report, entry.relative_path, f"too large: file is {entry.size} bytes, "
                       f"over loader.max_file_bytes ({self.loader.max_file_bytes})")
            return None
        t0 = time.perf_counter()
        self.phase = "crawl"
        try:
            data = crawler.read(entry, self.loader.max_file_bytes)
        except SourceFileVanished as exc:
            log.info("%s: treated as deleted", exc)
            report.vanished.append(entry.relative_path)
            return None
        except FileSkipped as exc:
            self.phase = "extract"
            self._fail(report, entry.relative_path, str(exc))
            return None
        except SourceError as exc:
            self._fail(report, entry.relative_path, str(exc))
            return None
        finally:
            report.seconds["read"] += time.perf_counter() - t0
        report.bodies_read += 1
        content_hash = hashlib.sha256(data).hexdigest()
        if existing is not None and existing.content_hash == content_hash and not force:
            self.catalog.touch_document(existing, entry.change_token)
            self.catalog.clear_failure(report.source, entry.relative_path)  # e.g. a past fetch
            report.unchanged += 1
            return None
        return _Fetched(entry, existing, content_hash, data)

    def _prepare_inline(self, fetched: _Fetched) -> PrepareOutcome:
        self.phase = "extract"
        try:
            return prepare_bytes(self._spec, fetched.data, fetched.entry.relative_path)
        except ExtractionError as exc:
            return PrepareFailure(str(exc))

    def _take(self, writer: _BatchWriter, fetched: _Fetched, outcome: PrepareOutcome) -> None:
        """Queue a prepared document for writing, or record why it could not be prepared."""
        report = writer.report
        if isinstance(outcome, PrepareCrash):
            self.phase = "extract"
            raise outcome.error
        if isinstance(outcome, PrepareFailure):
            self.phase = "extract"
            self._fail(report, fetched.entry.relative_path, outcome.reason)
            writer.file_done()
            return
        for phase, seconds in outcome.seconds.items():
            report.seconds[phase] += seconds
        _drop_shadowed_attachments(outcome, fetched.entry.relative_path, self._listed)
        writer.add(_Pending(fetched.entry, fetched.existing, fetched.content_hash, outcome))

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
        rows_spec = replace(self._spec, count_lines=False, repeated=frozenset())
        self.phase = "crawl"
        started = t0 = time.perf_counter()
        existing = self.catalog.documents_for_source(source)
        report.seconds["list"] += time.perf_counter() - t0
        if self.catalog.embedding_model() is None:
            self.catalog.set_embedding_model(self.embedder.name, self.embedder.dimension)
        writer = _BatchWriter(self, report, IngestProgress(total_files=len(existing)), progress)
        state = writer.state
        present: set[str] = set()
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
                writer.file_done()
                continue
            self.phase = "extract"
            document = ExtractedDocument(
                row.doc_id,
                tuple(Block(BlockKind.PARAGRAPH, p) for p in _paragraphs(row.text)),
                "text/plain",
            )
            entry = FileEntry(row.doc_id, row.doc_id, len(row.text.encode()), token)
            self.phase = "chunk"
            prepared = prepare_document(rows_spec, document)
            for phase, seconds in prepared.seconds.items():
                report.seconds[phase] += seconds
            writer.add(_Pending(entry, old, content_hash, prepared, row.doc_id, row.origin))
        writer.flush()
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
        report.wall_seconds = time.perf_counter() - started
        return report

    def _one_per_document_id(
        self,
        source: SourceRecord,
        entries: list[FileEntry],
        existing: dict[str, DocumentRecord],
        report: IngestReport,
    ) -> list[FileEntry]:
        """The entries with distinct document ids. Names that differ only in Unicode
        normalization (NFC and NFD) or in '\\' versus '/' share one id; the one already
        indexed under it is kept (else the first in path order) and the others reported, so
        the build never writes one id twice."""
        indexed = {document.doc_id: path for path, document in existing.items()}
        groups: dict[str, list[FileEntry]] = {}
        for entry in entries:
            groups.setdefault(document_id(source.urn, entry.name_path), []).append(entry)
        dropped: set[str] = set()
        for doc_id, group in groups.items():
            if len(group) < 2:
                continue
            kept = next((e for e in group if indexed.get(doc_id) == e.relative_path), group[0])
            for entry in group:
                if entry is not kept:
                    dropped.add(entry.relative_path)
                    self._fail(report, entry.relative_path, (
                        f"skipped: same document id as {kept.relative_path!a} (the names "
                        "are equal once normalized)"))
        return [e for e in entries if e.relative_path not in dropped] if dropped else entries

    def _fail(self, report: IngestReport, path: str, reason: str) -> None:
        log.warning("not indexed: %s/%s: %s", report.source.urn, path, reason)
        report.failed.append((path, reason))
        report.failed_phases[path] = self.phase
        self.catalog.record_failure(report.source, path, reason)

    def _clear_stale_failures(
        self, source: SourceRecord, report: IngestReport, unknown: tuple[str, ...]
    ) -> None:
        """Forget the failures of this source that this build did not record again: their
        files now index, are unchanged since they indexed, or are gone. (Every file that
        still fails is recorded again by each build; files below a folder this build could
        not read keep theirs.)"""
        failed_now = {path for path, _ in report.failed}
        for record in self.catalog.failures():
            if (record.namespace == source.namespace and record.source_urn == source.urn
                    and record.path not in failed_now and not record.path.startswith(unknown)):
                self.catalog.clear_failure(source, record.path)


class _BatchWriter:
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
        self.batch: list[_Pending] = []
        self.batch_chunks = 0
        self.batch_started = 0.0  # time.monotonic() when the batch's first document came

    def file_done(self) -> None:
        """Count a finished file (written, unchanged or failed) and report progress; writes
        a waiting batch that is due."""
        self.state.done_files += 1
        if self.progress:
            self.progress(self.state)
        if self.batch and time.monotonic() - self.batch_started >= COMMIT_EVERY_SECONDS:
            self.flush()

    def add(self, pending: _Pending) -> None:
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
        t0 = time.perf_counter()
        fresh = embedder.embed_documents(to_embed) if to_embed else None
        report.seconds["embed"] += time.perf_counter() - t0
        report.passages_embedded += len(to_embed)

        t0 = time.perf_counter()
        pipeline.phase = "store"
        unit_writes: list[DocumentWrite] = []
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
            report.count_write(unit.doc_id, doc_hashes, set(found))
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
            ))
        writes: list[DocumentWrite] = []
        for pending in batch:  # a file's write carries its attachments' writes
            count = 1 + len(pending.prepared.attachments)
            first, rest = unit_writes[0], unit_writes[1:count]
            unit_writes = unit_writes[count:]
            writes.append(replace(first, attachments=rest) if rest else first)
        catalog.write_documents(writes)  # one transaction, each document atomic
        report.seconds["store"] += time.perf_counter() - t0
        for pending in batch:
            path = pending.entry.relative_path
            (report.updated if pending.existing is not None else report.added).append(path)
            self.state.chunks_written = report.chunks_written
            self.file_done()


class _Unit(NamedTuple):
    """One document of a pending file: the file's own, or one of its attachments."""

    pending: _Pending
    doc_id: str
    path: str
    content_hash: str
    prepared: PreparedDocument


def _documents_of(pending: _Pending, urn: str) -> list[_Unit]:
    """A pending file's document, then each of its attachments' (path and id
    ``<file>/<attachment>``, content hash of the attachment's bytes)."""
    entry = pending.entry
    return [_Unit(pending, pending.doc_id or document_id(urn, entry.name_path),
                  entry.relative_path, pending.content_hash, pending.prepared)] + [
        _Unit(pending, document_id(urn, f"{entry.name_path}/{a.name}"),
              f"{entry.relative_path}/{a.name}", a.content_hash, a.prepared)
        for a in pending.prepared.attachments]


def _drop_shadowed_attachments(prepared: PreparedDocument, path: str, listed: set[str]) -> None:
    """Leave out the attachments whose path ``<path>/<name>`` a listed file has (an object
    store can hold ``x.mbox`` and ``x.mbox/a.pdf`` both): the file is the document of that
    path, the attachment is named in the mail's ``attachments_skipped``."""
    shadowed = [a for a in prepared.attachments if f"{path}/{a.name}" in listed]
    if not shadowed:
        return
    prepared.attachments = [a for a in prepared.attachments if a not in shadowed]
    metadata = dict(prepared.document.metadata)
    metadata.pop("attachments", None)
    if prepared.attachments:
        metadata["attachments"] = ", ".join(a.name for a in prepared.attachments)
    notes = [f"{a.name} (a file of the same path exists)" for a in shadowed]
    metadata["attachments_skipped"] = "; ".join(
        [metadata["attachments_skipped"], *notes] if "attachments_skipped" in metadata
        else notes)
    prepared.document = replace(prepared.document, metadata=metadata)


def _mails_to_read_again(files: dict[str, DocumentRecord], every: dict[str, DocumentRecord],
                         listed: set[str], unread: tuple[str, ...]
                         ) -> tuple[set[str], list[str]]:
    """Indexed files to read again although unchanged, and gone files to delete before
    the build writes. A mail is read again when one of its attachments now has the path of
    a listed file (the file wins it), or when a file that was indexed under its path is
    gone (an attachment it left out may come back, so that file's document is deleted
    first). Files below a folder the build could not list (``unread``) are left as
    they are."""
    again = {d.parent for path, d in every.items()
             if d.parent is not None and path in listed}
    first: list[str] = []
    for path in sorted(files):
        if path in listed or path.startswith(unread):
            continue
        parent, _, _ = path.rpartition("/")
        while parent:
            if parent in listed and parent in files:
                again.add(parent)
                first.append(path)
                break
            parent, _, _ = parent.rpartition("/")
    return {p for p in again if p is not None}, first


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs of a row value, whitespace collapsed."""
    import re

    parts = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return [p for p in parts if p]
