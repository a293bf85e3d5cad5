"""The incremental ingest pipeline for one document folder.

For every file: an unchanged change token (ETag or size + mtime) skips it without reading;
otherwise the bytes are hashed and an unchanged hash only refreshes the token. Changed and
new files are extracted, chunked and written in one transaction each (chunks whose embedded
text did not change keep their vectors, new ones are embedded behind:
:mod:`~docgraph.ingest.embed_behind`); files gone, even mid-build, are deleted. A file that
cannot be read or extracted, is too large, is not a regular file (a symlink, a FIFO) or
whose document the store refuses (:mod:`~docgraph.ingest.failed_writes`) is recorded with
its reason and skipped; whatever was indexed for it before stays searchable.
A build that completes leaves exactly its own failure records.

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

Table rows (``natural_language`` columns): :meth:`IngestPipeline.index_rows`, one document
per row, incremental by content hash.

Beside this module: :mod:`~docgraph.ingest.rows` builds a table's rows,
:mod:`~docgraph.ingest.batch` embeds and writes the prepared documents in committed
batches, :mod:`~docgraph.ingest.attachments` decides which attachments a mail keeps and
which mails are read again, :mod:`~docgraph.ingest.report` holds what a build reports.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from docgraph.config import LoaderSettings, SourcesSettings
from docgraph.embedding.embedders import Embedder
from docgraph.errors import (
    BuildInterrupted,
    EmbeddingModelMismatch,
    ExtractionError,
    FileSkipped,
    SourceError,
    SourceFileVanished,
    StoreFull,
)
from docgraph.graph.extract import EntityExtractor
from docgraph.ingest.access import NOBODY, BuildAccess, FailureSet, folder_access
from docgraph.ingest.attachments import drop_shadowed_attachments, mails_to_read_again
from docgraph.ingest.batch import (
    COMMIT_EVERY_CHUNKS,
    COMMIT_EVERY_DOCUMENTS,
    COMMIT_EVERY_SECONDS,
    BatchWriter,
    Pending,
)
from docgraph.ingest.boilerplate import repeated_floor
from docgraph.ingest.entries import one_per_document_id
from docgraph.ingest.failed_writes import clear_stale_failures, remember_failure
from docgraph.ingest.prepare import (
    PrepareSpec,
    prepare_bytes,
    source_language,
)
from docgraph.ingest.report import IngestProgress, IngestReport, ProgressCallback
from docgraph.ingest.rows import index_rows as index_table_rows
from docgraph.ingest.workers import (
    PoolTrigger,
    PrepareCrash,
    PrepareFailure,
    PrepareOutcome,
    PreparePool,
    portable_token_counter,
    refuse_in_worker_bootstrap,
    worker_count,
)
from docgraph.model import Access, DocumentRecord, SourceRecord
from docgraph.sources.access_rules import AccessRules, AccessUnreadable
from docgraph.sources.folder import FileEntry, FolderCrawler
from docgraph.sources.rows import RowDocument
from docgraph.store.base import Catalog, StoreCatalog
from docgraph.telemetry import span

# The report types and the commit batch sizes are imported from here by the build's
# callers (the facade, the refresher, the CLI, the tests).
__all__ = [
    "COMMIT_EVERY_CHUNKS",
    "COMMIT_EVERY_DOCUMENTS",
    "COMMIT_EVERY_SECONDS",
    "PARALLEL_AFTER_FILES",
    "IngestPipeline",
    "IngestProgress",
    "IngestReport",
    "ProgressCallback",
    "check_embedding_model",
]

log = logging.getLogger(__name__)

# Worker processes start only once this many files of one build need extracting (and, by
# default, once they would pay: workers.PoolTrigger): a small build never pays their start-up.
PARALLEL_AFTER_FILES = 32


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
    """Indexes document folders into a :class:`StoreCatalog` with an :class:`Embedder`.

    ``workers`` (``loader.workers``; 0 = one per core) processes prepare documents of a bulk
    build while this process embeds and writes; 1 prepares everything inline. Finished
    documents are committed in batches of at most ``embed_batch_chunks`` chunks,
    :data:`COMMIT_EVERY_DOCUMENTS` documents or :data:`COMMIT_EVERY_SECONDS`, their new
    chunks pending and embedded behind (``embed_behind``, :mod:`~docgraph.ingest.batch`).
    """

    def __init__(
        self,
        catalog: StoreCatalog,
        embedder: Embedder,
        loader: LoaderSettings,
        embed_batch_chunks: int = COMMIT_EVERY_CHUNKS,
        extractor: EntityExtractor | None = None,
        sources: SourcesSettings | None = None,
        embed_behind: bool = True,
    ) -> None:
        self.catalog, self.embedder, self.embed_behind = catalog, embedder, embed_behind
        self.loader = loader
        self.embed_batch_chunks = embed_batch_chunks
        self.extractor = extractor
        self.workers = worker_count(loader.workers)
        self.phase = "crawl"  # the phase in progress, for attributing an escaping error
        self._listed: set[str] = set()  # the relative paths of the build's listed files
        self.access = BuildAccess(AccessRules(()))  # a folder build reads its sidecars
        self.sources = sources  # the folders' own permission sources, [sources]
        # How files are prepared (read by the row build and the worker processes too).
        self.spec = PrepareSpec(
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
        return replace(self.spec, count_tokens=counter)

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
        with span("build.source", namespace=source.namespace):
            return self._index_source(source, progress, crawler)

    def _index_source(self, source: SourceRecord, progress: ProgressCallback | None,
                      crawler: FolderCrawler | None) -> IngestReport:
        """:meth:`index_source` after its checks."""
        report = IngestReport(source=source)
        started = time.perf_counter()
        self.phase = "crawl"
        crawler = crawler or FolderCrawler(source.urn, self.loader.include)
        with span("build.list"):
            entries = list(crawler.list_files())  # raises SourceError: nothing is changed
        self.access = folder_access(crawler, source.urn, self.sources, entries)
        report.not_included = dict(crawler.not_included)
        every = self.catalog.documents_for_source(source)
        # Attachments (a mail's, path <mail>/<name>) are written and deleted with their mail.
        existing = {path: d for path, d in every.items() if d.parent is None}
        self._listed = {e.relative_path for e in entries}
        unread = tuple(folder + "/" for folder in crawler.unlisted)  # kept as they are
        reread, shadowing = mails_to_read_again(existing, every, self._listed, unread)
        # Lines repeated across the source's documents (as stored) are left out of the
        # documents this build prepares; documents it does not read are checked at its end.
        self.spec = replace(self.spec, count_lines=True, repeated=frozenset(
            self.catalog.line_counts(source, repeated_floor(len(every)))),
            language=source_language(source.urn, self.sources))
        report.seconds["list"] = time.perf_counter() - started
        if self.catalog.embedding_model() is None:
            self.catalog.set_embedding_model(self.embedder.name, self.embedder.dimension)
        self.phase = "extract"  # skipped like a file that cannot be extracted, not a fetch
        for skipped in crawler.skipped:
            self.fail(report, skipped.relative_path, skipped.reason)
        entries, duplicates = one_per_document_id(source.urn, entries, existing)
        for path, reason in duplicates:
            self.fail(report, path, reason)
        for path in shadowing:  # gone files whose paths their mail's attachments take back
            self.catalog.delete_document(existing.pop(path))
            report.removed.append(path)

        writer = BatchWriter(self, report, IngestProgress(total_files=len(entries)), progress)
        try:
            self._visit(crawler, entries, existing, reread, writer, report)
            self._finish(crawler, entries, existing, report, progress)
            writer.filler.drain()  # what is pending: this build's, or an interrupted one's
        except KeyboardInterrupt as exc:
            # Ctrl-C: the batches committed so far stay; nothing not yet visited is deleted,
            # failures are not cleared and the source is not marked indexed, so the next
            # build continues where this one stopped (see COMMIT_EVERY_DOCUMENTS).
            kept = len(report.added) + len(report.updated)
            raise BuildInterrupted(kept, writer.state.done_files, writer.state.total_files,
                                   self.phase) from exc
        except StoreFull as exc:  # the batch was rolled back; the committed ones stay
            kept = len(report.added) + len(report.updated)
            raise StoreFull(f"{exc}. This build committed {kept} documents, which are "
                            "kept; the batch being written was rolled back. Free space and "
                            "run the same build again: it continues where it stopped") from exc
        report.wall_seconds = time.perf_counter() - started
        return report

    def _visit(self, crawler: FolderCrawler, entries: list[FileEntry],
               existing: dict[str, DocumentRecord], reread: set[str], writer: BatchWriter,
               report: IngestReport) -> None:
        """Fetch, prepare (inline, or in worker processes for a bulk build), embed and
        write every listed file, committing in bounded batches."""
        pool: PreparePool | None = None
        trigger = PoolTrigger(self.loader.workers, self.workers, len(entries),
                              PARALLEL_AFTER_FILES)
        try:
            for visited, entry in enumerate(entries, 1):
                writer.state.current = entry.relative_path
                refused = self.access.unreadable(entry, existing.get(entry.relative_path))
                if refused is not None:  # fails closed: not indexed, reported
                    self.fail(report, entry.relative_path, refused, "extract")
                    writer.file_done()
                    continue
                fetched = self._fetch(crawler, entry, existing.get(entry.relative_path), report,
                                      force=entry.relative_path in reread)
                if fetched is None:
                    writer.file_done()
                    continue
                if trigger.due(visited) and pool is None \
                        and (spec := self._worker_spec()) is not None:
                    pool = PreparePool(spec, self.workers)
                    report.workers = self.workers
                if pool is None:
                    self._take(writer, fetched, trigger.inline(self._prepare_inline, fetched))
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
        if self.access.changes:  # permissions changed at the source: stored, not re-embedded
            report.access_changed = self.catalog.set_document_access(self.access.changes)
            self.access.changes = {}
        gone = set(report.vanished)
        present = {e.relative_path for e in entries if e.relative_path not in gone}
        unknown = tuple(folder + "/" for folder in crawler.unlisted)  # unread: keep as is
        self.delete_absent(report, existing,
                            lambda path: path in present or path.startswith(unknown))
        self._drop_repeated_lines(crawler, entries, report, progress)
        t0 = time.perf_counter()
        clear_stale_failures(self.catalog, source, report.failed, unknown)
        report.seconds["store"] += time.perf_counter() - t0
        self.catalog.mark_indexed(source)

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
        self.spec = replace(self.spec, repeated=repeated)
        written = set(report.added) | set(report.updated)
        writer = BatchWriter(self, report, IngestProgress(total_files=len(redo)), progress)
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
            self.access.unchanged(existing, entry)
            return None
        if entry.size > self.loader.max_file_bytes:
            self.fail(report, entry.relative_path, f"too large: file is {entry.size} bytes, "
                       f"over loader.max_file_bytes ({self.loader.max_file_bytes})",
                       kept=(existing, entry))
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
            self.fail(report, entry.relative_path, str(exc), kept=(existing, entry))
            return None
        except SourceError as exc:
            self.fail(report, entry.relative_path, str(exc), kept=(existing, entry))
            return None
        finally:
            report.seconds["read"] += time.perf_counter() - t0
        report.bodies_read += 1
        content_hash = hashlib.sha256(data).hexdigest()
        if existing is not None and existing.content_hash == content_hash and not force:
            self.catalog.touch_document(existing, entry.change_token)
            self.catalog.clear_failure(report.source, entry.relative_path)  # e.g. a past fetch
            report.unchanged += 1
            self.access.unchanged(existing, entry)
            return None
        return _Fetched(entry, existing, content_hash, data)

    def _prepare_inline(self, fetched: _Fetched) -> PrepareOutcome:
        self.phase = "extract"
        try:
            with span("build.prepare"):
                return prepare_bytes(self.spec, fetched.data, fetched.entry.relative_path)
        except ExtractionError as exc:
            return PrepareFailure(str(exc))

    def _take(self, writer: BatchWriter, fetched: _Fetched, outcome: PrepareOutcome) -> None:
        """Queue a prepared document for writing, or record why it could not be prepared."""
        report = writer.report
        if isinstance(outcome, PrepareCrash):
            self.phase = "extract"
            raise outcome.error
        if isinstance(outcome, PrepareFailure):
            self.phase = "extract"
            self.fail(report, fetched.entry.relative_path, outcome.reason,
                      kept=(fetched.existing, fetched.entry), data=fetched.data)
            writer.file_done()
            return
        for phase, seconds in outcome.seconds.items():
            report.seconds[phase] += seconds
        drop_shadowed_attachments(outcome, fetched.entry.relative_path, self._listed)
        path = fetched.entry.relative_path
        try:
            access = self.access.of_document(fetched.entry, dict(outcome.document.metadata))
        except AccessUnreadable as exc:
            self.fail(report, path, str(exc), "extract", access=NOBODY)
            self.access.withhold(fetched.existing)
            writer.file_done()
            return
        writer.add(Pending(fetched.entry, fetched.existing, fetched.content_hash, outcome,
                           access=access))

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
        return index_table_rows(self, source, rows, progress)

    def delete_absent(self, report: IngestReport, existing: dict[str, DocumentRecord],
                       kept: Callable[[str], bool]) -> None:
        """Delete the documents of ``existing`` (path -> record) whose path ``kept`` refuses:
        files gone from the folder, rows gone from the table. Timed as the store phase."""
        t0 = time.perf_counter()
        self.phase = "store"
        for path, document in sorted(existing.items()):
            if not kept(path):
                self.catalog.delete_document(document)
                report.removed.append(path)
        report.seconds["store"] += time.perf_counter() - t0

    def fail(self, report: IngestReport, path: str, reason: str, phase: str | None = None,
             kept: tuple[DocumentRecord | None, FileEntry] | None = None,
             access: Access | FailureSet = FailureSet.FOLDER, data: bytes | None = None
             ) -> None:
        """Report and record that ``path`` is not indexed (the next build tries it again),
        in ``phase`` (else the build's current one). ``kept``: the file's indexed version,
        which stays, and its entry: the folder's permissions now are stored for it (a
        sidecar or chmod tightened in the same build is not lost with the new version).
        ``access``: who may be told of the failure (its document's own set), else the set
        :meth:`BuildAccess.of_failure` finds for it (``data``: its bytes, where it was read:
        what it says of its own readers)."""
        log.warning("not indexed: %s/%s: %s", report.source.urn, path, reason)
        report.failed.append((path, reason))
        report.failed_phases[path] = phase or self.phase
        if kept is not None and kept[0] is not None:
            self.access.unchanged(kept[0], kept[1])
        told = access if access is not FailureSet.FOLDER else self.access.of_failure(
            path, kept[0] if kept is not None else None, data)
        remember_failure(self.catalog, report.source, path, reason, told)
