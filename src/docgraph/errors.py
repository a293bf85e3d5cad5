"""Errors docgraph raises on purpose. Each message names the input that caused it."""

from __future__ import annotations


class DocgraphError(Exception):
    """Base class of every error docgraph raises deliberately."""


class ConfigError(DocgraphError):
    """A setting or configuration file is invalid."""


class SourceError(DocgraphError):
    """A source (folder URN) cannot be registered or crawled."""


class SourceFileVanished(SourceError):
    """A listed file was gone when its body was read (deleted or renamed during the crawl):
    the build treats it as deleted, not as a failed fetch."""


class FileSkipped(SourceError):
    """A listed entry is not indexed on purpose (not a regular file, or over a size limit):
    it is reported as skipped, never counted as a failed fetch."""


class ExtractionError(DocgraphError):
    """A file could not be turned into text; the message says which file and why."""


class FileTooLarge(ExtractionError):
    """A file holds, or unpacks to, more than a loader limit allows; the message names the
    limit (``loader.max_file_bytes``, ``max_unpacked_bytes`` or ``max_text_chars``)."""


class EmbeddingModelMismatch(DocgraphError):
    """The index was built with another embedding model than the one configured."""


class EmbeddingError(DocgraphError):
    """The embedding model failed or returned vectors of the wrong shape."""


class StoreError(DocgraphError):
    """The catalog or chunk index rejected an operation."""


class StoreUnavailable(StoreError):
    """The store cannot be reached right now (its server is down, restarting or refuses
    connections): nothing is wrong with the request, and the same request succeeds once the
    store is back. The server answers 503 with ``Retry-After`` instead of a 500
    (:func:`docgraph.store.outages.store_unavailable` recognises the driver's errors)."""


class StoreFull(StoreError):
    """The disk (or the database's size limit) was full during a write. The write was rolled
    back, so the index holds what was committed before it; the message names the index
    file, the file system holding it and its free space, and (for a build) the documents
    kept."""


class ReadOnlyIndex(StoreError):
    """A change was asked of an index opened read-only (a read-only mount, a replica copy,
    or ``store.read_only``); the message names the index and why it is read-only."""


class InvalidQuery(DocgraphError):
    """A search request is malformed (empty query, bad k, unknown mode, no namespaces)."""


class UnsupportedByBackend(DocgraphError):
    """The configured store backend does not offer this feature (the message names both)."""


class RefreshBusy(DocgraphError):
    """Another process leads the refresh of this index (the message names it): this one
    does not build concurrently."""


class NotFound(DocgraphError):
    """A document or chunk id names nothing the caller may read. The message is the same
    whether the id never existed, lies outside the caller's namespaces or is a row the
    caller may not see, so the answer reveals nothing about what exists."""


class BuildInterrupted(KeyboardInterrupt):
    """A build stopped by Ctrl-C (SIGINT). What it committed before stays indexed (the
    pipeline commits finished documents in bounded batches): ``kept`` documents written by
    this build, ``done`` of ``total`` listed files visited. Nothing it had not visited yet
    was deleted, so running the same build again continues where it stopped.

    A :class:`KeyboardInterrupt`, so code that only catches :class:`Exception` lets it
    through, as it would the plain interrupt."""

    def __init__(self, kept: int, done: int = 0, total: int = 0, phase: str = "") -> None:
        super().__init__(f"interrupted: {kept} documents kept, run the same command to "
                         "continue")
        self.kept = kept
        self.done = done
        self.total = total
        self.phase = phase


class UnknownNamespace(InvalidQuery):
    """A call named a namespace the index does not hold (the message names it and the
    namespaces that exist), instead of answering it with nothing."""
